package bench_test

import (
	"context"
	"net/http"
	"strings"
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

const putJSON = `{"spec":{"operatingMode":"Suspended"}}`

// BenchmarkRetryPutBaseline is the baseline of BenchmarkRetryPut: a PUT
// with a body on the bare transport.
func BenchmarkRetryPutBaseline(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				send(b, s.Base, context.Background(), http.MethodPut, s.URL, strings.NewReader(putJSON))
			}
		})
	}
}

// BenchmarkRetryPut is the retry middleware on a PUT with a body that
// succeeds: the request copy that marks the caller's body, so that its
// failure is told apart from the connection's.
func BenchmarkRetryPut(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			rt := retry.New()(s.Base)
			b.ReportAllocs()
			for b.Loop() {
				send(b, rt, context.Background(), http.MethodPut, s.URL, strings.NewReader(putJSON))
			}
		})
	}
}
