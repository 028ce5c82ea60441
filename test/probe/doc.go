// Package probe holds the test of `kubewire probe` against a real
// kube-apiserver and etcd (test/kubetest). It is a package of the test
// module, never tagged, so that cmd/kubewire's go.mod requires no test
// rig. The test builds the command from its own directory, at the
// command's versions, and runs it.
package probe
