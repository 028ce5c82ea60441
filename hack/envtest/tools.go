//go:build tools

// Package tools pins the modules the envtest binaries are built from:
// kube-apiserver from k8s.io/kubernetes and etcd from go.etcd.io/etcd/server.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
