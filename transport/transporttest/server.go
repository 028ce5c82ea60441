package transporttest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/kubewire/kubewire/transport"
)

// Server is one loopback server of [NewServers], with a base transport
// that trusts it.
type Server struct {
	// Name is "HTTP/1.1" or "HTTP/2", fit for a subtest's name.
	Name string
	// URL is the server's http:// (HTTP/1.1) or https:// (HTTP/2) URL.
	URL string
	// ProtoMajor is the major HTTP version the server speaks, as
	// http.Response.ProtoMajor reports it: 1 or 2.
	ProtoMajor int
	// Base is a pooled transport from transport.New, for this server
	// alone: a test that counts or closes connections sees only its own.
	Base *http.Transport
}

// Servers are the servers of [NewServers], one field per protocol, so
// that a test that needs one protocol names it.
type Servers struct {
	HTTP1 Server // plain HTTP/1.1
	HTTP2 Server // HTTP/2 over TLS
}

// All returns every server, for a test that runs over each protocol. A
// protocol added later is added here too, so a loop over All covers it.
func (s Servers) All() []Server { return []Server{s.HTTP1, s.HTTP2} }

// NewServers starts h twice, over HTTP/1.1 (plain) and over HTTP/2 (TLS).
// Both servers stop, and both transports close their idle connections,
// when tb ends.
//
// Two protocols because a middleware meets both under client-go: HTTP/2
// multiplexes requests on one connection and fails them with stream
// resets and GOAWAYs, HTTP/1.1 gives each request a connection of its own.
func NewServers(tb testing.TB, h http.Handler) Servers {
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
	return Servers{
		HTTP1: Server{Name: "HTTP/1.1", URL: h1.URL, ProtoMajor: 1, Base: b1},
		HTTP2: Server{Name: "HTTP/2", URL: h2.URL, ProtoMajor: 2, Base: b2},
	}
}

// BehindProxy starts h over HTTP/1.1 with a [Proxy] in front and returns
// the proxy's http:// URL and the proxy; both stop when tb ends.
func BehindProxy(tb testing.TB, h http.Handler) (string, *Proxy) {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	p, err := NewProxy(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return "http://" + p.Addr(), p
}

// RefusedURL returns the http:// URL of a loopback port that nothing
// listens on: a dial to it is refused, before any byte of a request is
// sent, so any method may be retried after it.
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

// NewUpgradeServer starts a loopback HTTP/1.1 server that answers every
// request with 101 Switching Protocols and then echoes each line it reads
// as "echo: <line>", until the client closes, and returns its http:// URL.
// It stands in for the exec, attach and port-forward subresources of an
// API server, whose streams client-go reads from the 101 response's body.
//
// It stops when tb ends, upgraded connections included: an
// httptest.Server forgets a hijacked connection, so a client that never
// closes its end would otherwise keep the server's goroutine for good.
func NewUpgradeServer(tb testing.TB) string {
	tb.Helper()
	var (
		mu       sync.Mutex
		hijacked = map[net.Conn]struct{}{}
		stopped  bool
		handlers sync.WaitGroup
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			tb.Errorf("hijacking the upgrade request: %v", err)
			return
		}
		mu.Lock()
		if stopped {
			mu.Unlock()
			_ = conn.Close()
			return
		}
		hijacked[conn] = struct{}{}
		handlers.Add(1)
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(hijacked, conn)
			mu.Unlock()
			_ = conn.Close()
			handlers.Done()
		}()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.WriteString("echo: " + line)
			_ = brw.Flush()
		}
	}))
	tb.Cleanup(srv.Close)
	// Registered after srv.Close, so it runs first.
	tb.Cleanup(func() {
		mu.Lock()
		stopped = true
		for c := range hijacked {
			_ = c.Close()
		}
		mu.Unlock()
		handlers.Wait()
	})
	return srv.URL
}

// Upgrade sends an upgrade request for an exec subresource to url (from
// [NewUpgradeServer]) through rt and returns the 101 response's body,
// which is closed when tb ends if the test has not closed it. It fails tb
// unless the response is a 101 whose body is an io.ReadWriteCloser, as
// net/http makes it: client-go writes the stream through that body, so a
// middleware that wraps it in a read-only body breaks exec.
func Upgrade(tb testing.TB, rt http.RoundTripper, url string) io.ReadWriteCloser {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := rt.RoundTrip(req)
	switch {
	case err != nil && resp != nil:
		_ = resp.Body.Close()
		tb.Fatalf("upgrade request: a response and an error (%v); a RoundTripper returns one", err)
	case err != nil:
		tb.Fatalf("upgrade request: %v", err)
	case resp == nil:
		tb.Fatal("upgrade request: no response and no error")
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
		tb.Fatalf("upgrade request: status %d, want 101", resp.StatusCode)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		_ = resp.Body.Close()
		tb.Fatalf("the 101 response's body is %T, not an io.ReadWriteCloser", resp.Body)
	}
	tb.Cleanup(func() { _ = rwc.Close() })
	return rwc
}

// echoes checks that rwc, the body of a 101 from [NewUpgradeServer],
// carries bytes both ways, then closes it.
func echoes(t *testing.T, rwc io.ReadWriteCloser) {
	t.Helper()
	if _, err := rwc.Write([]byte("hello\n")); err != nil {
		t.Fatalf("writing to the upgraded connection: %v", err)
	}
	line, err := bufio.NewReader(rwc).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from the upgraded connection: %v", err)
	}
	if line != "echo: hello\n" {
		t.Errorf("the upgraded connection answered %q, want %q", line, "echo: hello\n")
	}
	if err := rwc.Close(); err != nil {
		t.Errorf("closing the upgraded connection: %v", err)
	}
}
