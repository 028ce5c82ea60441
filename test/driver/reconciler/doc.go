// Package reconciler holds the reconciler's tests and benchmarks against a
// real kube-apiserver with agent-sandbox's CRD and controller.
package reconciler
