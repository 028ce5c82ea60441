// Package drivertest is the test rig of package driver and package
// reconciler: a scripted API server on a real socket, and a real
// kube-apiserver with agent-sandbox's CRD and controller, with counters
// of the writes a driver sends.
package drivertest
