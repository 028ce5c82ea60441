// Package bench holds the benchmarks of the stack's modules (the root,
// kubeadapter, metrics, tracing), each reported against a baseline
// measured in the same run, beside the libraries they compare with. It is
// a package of the test module, never tagged, so that no published go.mod
// requires a comparison library. It has no code of its own; run
//
//	make bench
//
// or go test -run '^$' -bench . -benchmem ./test/bench/
package bench
