// Package testserver starts loopback servers for tests and benchmarks: the
// same handler over HTTP/1.1 and HTTP/2 with a base transport for each, or a
// handler behind a fault proxy.
package testserver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// RefusedURL returns the http URL of a loopback port that nothing listens
// on: a dial to it is refused, a failure retryable for any method.
func RefusedURL(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return u
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

// DialFunc is the type of http.Transport.DialContext and rest.Config.Dial.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Conns tells a test when the client closes a connection it dialed, so a
// test can wait for a health check to give up on a connection instead of
// sleeping for as long as it should take. The zero value is ready to use.
type Conns struct {
	mu     sync.Mutex
	dialed int
	closed map[int]chan struct{}
}

// Dial wraps dial; the connections it opens are numbered from 0.
func (c *Conns) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		ch := c.chanLocked(c.dialed)
		c.dialed++
		c.mu.Unlock()
		return &watchedConn{Conn: nc, closed: ch}, nil
	}
}

// Closed returns a channel that is closed when the client closes its i-th
// connection.
func (c *Conns) Closed(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chanLocked(i)
}

// CheckHealthClose checks, while the peer holds every byte, whether the
// HTTP/2 health check closes the i-th connection: when closes is true it
// must within 10 seconds (a check due after 100ms fails 100ms later); when
// false it must still be open after 600ms, past when such a check would
// have closed it.
func (c *Conns) CheckHealthClose(t testing.TB, i int, closes bool) {
	t.Helper()
	if !closes {
		select {
		case <-c.Closed(i):
			t.Fatal("the connection was closed with no health check due")
		case <-time.After(600 * time.Millisecond):
		}
		return
	}
	select {
	case <-c.Closed(i):
	case <-time.After(10 * time.Second):
		t.Fatal("the health check did not close the connection (PING after 100ms, no answer 100ms later)")
	}
}

// Dialed reports how many connections were dialed.
func (c *Conns) Dialed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialed
}

func (c *Conns) chanLocked(i int) chan struct{} {
	if c.closed == nil {
		c.closed = map[int]chan struct{}{}
	}
	ch, ok := c.closed[i]
	if !ok {
		ch = make(chan struct{})
		c.closed[i] = ch
	}
	return ch
}

type watchedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (w *watchedConn) Close() error {
	err := w.Conn.Close()
	w.once.Do(func() { close(w.closed) })
	return err
}
