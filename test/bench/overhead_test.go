package bench_test

import (
	"net/http"
	"testing"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// The Overhead benchmarks run the middleware over a RoundTripper that
// answers at once, without a network: what is left is the CPU and the
// allocations of each layer, without the loopback's scheduling noise.
// OverheadBare is their baseline, the caller's own deadline. The
// RoundTripper is transporttest.Answerer, which hands each request a
// reused loopback connection through its trace, as net/http's pool does.
//
//	hack/benchratio.sh ./test/bench OverheadBare OverheadTimeout OverheadPooltrace OverheadStack -n 8

const answerURL = "http://127.0.0.1/api/v1/namespaces/default/pods/p"

// BenchmarkOverheadBare is the baseline: no middleware, the deadline in the
// caller's context.
func BenchmarkOverheadBare(b *testing.B) {
	benchOverhead(b, false, func(rt http.RoundTripper) http.RoundTripper { return rt })
}

// BenchmarkOverheadTimeout is the timeout middleware, which gives the
// deadline in place of the caller.
func BenchmarkOverheadTimeout(b *testing.B) {
	benchOverhead(b, true, timeout.New(deadline))
}

// BenchmarkOverheadPooltrace is pooltrace, the deadline in the caller's
// context.
func BenchmarkOverheadPooltrace(b *testing.B) {
	benchOverhead(b, false, pooltrace.New())
}

// BenchmarkOverheadStack is pooltrace over timeout, as BenchmarkStack.
func BenchmarkOverheadStack(b *testing.B) {
	benchOverhead(b, true, transport.Chain(pooltrace.New(), timeout.New(deadline)))
}

// benchOverhead is benchCandidate without a network.
func benchOverhead(b *testing.B, ownDeadline bool, wrap func(http.RoundTripper) http.RoundTripper) {
	loop(b, wrap(transporttest.NewAnswerer(b)), ownDeadline, answerURL)
}
