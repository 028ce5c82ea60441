package bench_test

import (
	"context"
	"testing"

	"github.com/kubewire/kubewire/retry"
)

// BenchmarkRetryBaseline is the bare pooled transport, for BenchmarkRetry.
func BenchmarkRetryBaseline(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				roundTrip(b, s.Base, context.Background(), s.URL)
			}
		})
	}
}

// BenchmarkRetry is the retry middleware on the same transport, on requests
// that succeed: the cost every request pays for retries it does not need.
func BenchmarkRetry(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			rt := retry.New()(s.Base)
			b.ReportAllocs()
			for b.Loop() {
				roundTrip(b, rt, context.Background(), s.URL)
			}
		})
	}
}
