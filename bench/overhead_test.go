package bench_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// The Overhead benchmarks run the middleware over a RoundTripper that
// answers at once, without a network: what is left is the CPU and the
// allocations of each layer, without the loopback's scheduling noise.
// OverheadBare is their baseline, the caller's own deadline.
//
//	hack/benchratio.sh ./bench OverheadBare OverheadTimeout OverheadPooltrace OverheadStack -n 8

// answer is a RoundTripper that answers every request at once. It hands
// the request a reused connection through the request's trace, as
// net/http's pool does, so that a GotConn hook costs what it costs there.
type answer struct{ conn net.Conn }

func newAnswer(b *testing.B) answer {
	c1, c2 := net.Pipe()
	b.Cleanup(func() {
		_ = c1.Close()
		_ = c2.Close()
	})
	return answer{conn: c1}
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: a.conn, Reused: true, WasIdle: true, IdleTime: time.Second})
	}
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
	loop(b, wrap(newAnswer(b)), ownDeadline, answerURL)
}
