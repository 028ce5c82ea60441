package bench_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

const budget = 30 * time.Second

type loopback struct {
	name string
	url  string
	base *http.Transport
}

func servers(b *testing.B) []loopback {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Success"}`)
	})
	h1 := httptest.NewServer(h)
	b.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	b.Cleanup(h2.Close)
	b1, err := transport.New()
	if err != nil {
		b.Fatal(err)
	}
	b2, err := transport.New(transport.WithTLSConfig(h2.Client().Transport.(*http.Transport).TLSClientConfig))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(b1.CloseIdleConnections)
	b.Cleanup(b2.CloseIdleConnections)
	return []loopback{{"HTTP1", h1.URL, b1}, {"HTTP2", h2.URL, b2}}
}

func roundTrip(b *testing.B, rt http.RoundTripper, ctx context.Context, u string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
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
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				roundTrip(b, s.base, ctx, s.url)
				cancel()
			}
		})
	}
}

// BenchmarkStack is the kubewire stack (pooltrace over timeout) on the same
// transport, the deadline coming from the timeout middleware.
func BenchmarkStack(b *testing.B) {
	for _, s := range servers(b) {
		b.Run(s.name, func(b *testing.B) {
			rt := transport.Chain(pooltrace.New(), timeout.New(budget))(s.base)
			b.ReportAllocs()
			for b.Loop() {
				roundTrip(b, rt, context.Background(), s.url)
			}
		})
	}
}
