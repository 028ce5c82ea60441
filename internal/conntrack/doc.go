// Package conntrack tells a test when a client closes a connection it
// dialed: the contract suite in transport/transporttest and the root
// module's own tests share it. It imports the standard library only, so
// that transporttest brings its users nothing more. Its files are
// generated from the templates in hack/shared (targets.txt), which
// test/kubeadapter's copy shares.
package conntrack
