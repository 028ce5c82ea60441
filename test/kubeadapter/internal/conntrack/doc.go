// Package conntrack tells a test when a client closes a connection it
// dialed: test/kubeadapter's copy of the root module's internal/conntrack,
// which its tests may not import. Its files are generated from the
// templates in hack/shared (targets.txt), the one source of both copies.
package conntrack
