// Package bench holds kubewire's benchmarks, each reported against a
// baseline measured in the same run. It has no code of its own; run
//
//	make bench
//
// or go test -run '^$' -bench . -benchmem ./bench/
package bench
