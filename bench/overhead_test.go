package bench_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// The Overhead benchmarks run the middleware over a RoundTripper that
// answers at once, without a network: what is left is the CPU and the
// allocations of each layer, without the loopback's scheduling noise.
// OverheadBare is their baseline, the caller's own deadline.
//
//	hack/benchratio.sh ./bench OverheadBare OverheadTimeout OverheadPooltrace OverheadStack

// answer is a RoundTripper that answers every request at once.
type answer struct{}

func (answer) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusOK,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Body:       io.NopCloser(strings.NewReader(`{"kind":"Status","status":"Success"}`)),
		Request:    req,
	}, nil
}

const answerURL = "http://127.0.0.1/api/v1/namespaces/default/pods/p"

func BenchmarkOverheadBare(b *testing.B) {
	benchOverhead(b, false, func(rt http.RoundTripper) http.RoundTripper { return rt })
}

func BenchmarkOverheadTimeout(b *testing.B) {
	benchOverhead(b, true, timeout.New(budget))
}

func BenchmarkOverheadPooltrace(b *testing.B) {
	benchOverhead(b, false, pooltrace.New())
}

func BenchmarkOverheadStack(b *testing.B) {
	benchOverhead(b, true, transport.Chain(pooltrace.New(), timeout.New(budget)))
}

// benchOverhead is benchCandidate without a network: when ownDeadline is
// false the caller's context carries the deadline.
func benchOverhead(b *testing.B, ownDeadline bool, wrap func(http.RoundTripper) http.RoundTripper) {
	rt := wrap(answer{})
	b.ReportAllocs()
	for b.Loop() {
		if ownDeadline {
			roundTrip(b, rt, context.Background(), answerURL)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		roundTrip(b, rt, ctx, answerURL)
		cancel()
	}
}
