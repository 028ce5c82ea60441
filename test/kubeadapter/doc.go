// Package kubeadapter holds kubeadapter's tests against a real
// kube-apiserver and etcd (test/kubetest). It is a module of its own,
// never tagged, so that kubeadapter's go.mod requires no test rig; `make
// test` runs it, and `make clientgo` runs it on each supported client-go
// release beside kubeadapter's own tests.
package kubeadapter
