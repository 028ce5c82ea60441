// Package drivertest is the test rig of package driver and package
// reconciler: client-go's fake clientsets (agent-sandbox's generated one
// for the sandboxes) with the API server's optimistic concurrency on
// merge patches, and a real kube-apiserver with agent-sandbox's CRD and
// controller, with counters of the writes a driver sends.
package drivertest
