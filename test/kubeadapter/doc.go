// Package kubeadapter holds kubeadapter's tests against a real
// kube-apiserver and etcd (test/kubetest). It is a package of the test
// module, never tagged, so that kubeadapter's go.mod requires no test rig;
// `make test` runs it at the newest supported client-go, and `make ci` on
// each older one beside kubeadapter's own tests (`make clientgo`).
package kubeadapter
