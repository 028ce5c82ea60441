// Package drivertest is what the tests of package driver and package
// reconciler share: client-go's fake clientsets (agent-sandbox's
// generated one for the sandboxes) with the API server's optimistic
// concurrency on merge patches. The tests against a real kube-apiserver
// and agent-sandbox's controller are in the untagged module test/driver,
// with their own rig, so that the driver's go.mod requires none.
package drivertest
