// Package probe holds the test of `kubewire probe` against a real
// kube-apiserver and etcd (test/kubetest). It is a module of its own, never
// tagged, so that cmd/kubewire's go.mod requires no test rig. The test
// builds the command (a tool of this module), as a user's `go install`
// does, and runs it.
package probe
