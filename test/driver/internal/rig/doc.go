// Package rig is the rig of the driver's tests against a real
// kube-apiserver with agent-sandbox's CRD and controller, with counters of
// the writes a driver sends. The driver's own tests, on client-go's fake
// clientsets, have theirs in the driver module.
package rig
