package bench_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// deadline is every benchmark's timeout, whether kubewire's or the caller's.
const deadline = 30 * time.Second

func servers(b *testing.B) []transporttest.Server {
	return transporttest.NewServers(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Success"}`)
	})).All()
}

func roundTrip(b *testing.B, rt http.RoundTripper, ctx context.Context, u string) {
	send(b, rt, ctx, http.MethodGet, u, nil)
}

// send sends one request through rt and reads its answer.
func send(b *testing.B, rt http.RoundTripper, ctx context.Context, method, u string, body io.Reader) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// BenchmarkBare is the baseline: the bare pooled transport, with the same
// deadline given by the caller's context, the least any deadline costs.
func BenchmarkBare(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) { loop(b, s.Base, false, s.URL) })
	}
}

// BenchmarkStack is the kubewire stack (pooltrace over timeout) on the same
// transport, the deadline coming from the timeout middleware.
func BenchmarkStack(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			loop(b, transport.Chain(pooltrace.New(), timeout.New(deadline))(s.Base), true, s.URL)
		})
	}
}
