// Package tracing holds tracing's tests against a real kube-apiserver and
// etcd (test/kubetest) behind a fault proxy, and the span trees the README
// shows beside otelhttp's for the same failure. It is a package of the test
// module, never tagged, so that tracing's go.mod requires no test rig,
// client-go or otelhttp; `make test` runs it.
package tracing
