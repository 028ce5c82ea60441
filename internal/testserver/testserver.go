// Package testserver starts loopback servers for tests and benchmarks: the
// same handler over HTTP/1.1 and HTTP/2 with a base transport for each, or a
// handler behind a fault proxy.
package testserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/faultproxy"
	"github.com/kubewire/kubewire/transport"
)

// Server is one of the pair.
type Server struct {
	// Name is "HTTP/1.1" or "HTTP/2".
	Name  string
	URL   string
	HTTP2 bool
	// Base is a pooled transport that trusts the server.
	Base *http.Transport
}

// Pair starts h over HTTP/1.1 and over HTTP/2 and stops both, and closes
// the transports' idle connections, when tb ends.
func Pair(tb testing.TB, h http.Handler) []Server {
	tb.Helper()
	h1 := httptest.NewServer(h)
	tb.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	tb.Cleanup(h2.Close)

	b1, err := transport.New()
	if err != nil {
		tb.Fatal(err)
	}
	b2, err := transport.New(transport.WithTLSConfig(h2.Client().Transport.(*http.Transport).TLSClientConfig))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b1.CloseIdleConnections)
	tb.Cleanup(b2.CloseIdleConnections)
	return []Server{{"HTTP/1.1", h1.URL, false, b1}, {"HTTP/2", h2.URL, true, b2}}
}

// BehindProxy starts h over HTTP/1.1 with a fault proxy in front and
// returns the proxy's URL and the proxy; both stop when tb ends.
func BehindProxy(tb testing.TB, h http.Handler) (string, *faultproxy.Proxy) {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	p, err := faultproxy.New(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return "http://" + p.Addr(), p
}
