// Package driver holds the driver's tests against a real kube-apiserver
// and etcd with agent-sandbox's CRD and controller (test/kubetest,
// test/sandboxtest); package reconciler below holds the reconciler's. It
// is a module of its own, never tagged, so that the driver's go.mod
// requires no test rig.
package driver
