// Package contract checks that a middleware honours the RoundTripper
// contract, against real loopback servers over HTTP/1.1 and over HTTP/2
// (TLS). Every middleware's tests call [Run].
package contract

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/internal/testserver"
	"github.com/kubewire/kubewire/transport"
)

// patience bounds every wait for something that must happen. It is a hang
// guard, not a measurement: far above what a loaded machine needs.
const patience = 30 * time.Second

// Run checks middleware mw, each case over HTTP/1.1 and over HTTP/2 unless
// it says otherwise:
//
//   - the caller's request is not modified (method, URL, headers, context,
//     body);
//   - the request body is closed on success and on every error path;
//   - a response and an error never come together, and a non-2xx status is
//     a response, not an error;
//   - a 101 Switching Protocols response body stays an io.ReadWriteCloser
//     that works both ways (HTTP/1.1 only: HTTP/2 has no 101);
//   - the RoundTripper implements WrappedRoundTripper, returning what it
//     wraps, and forwards CloseIdleConnections to it, down to the pool;
//   - applied to a nil RoundTripper, the middleware sends through
//     http.DefaultTransport, as http.Client does, instead of panicking
//     (HTTP/1.1 only: http.DefaultTransport trusts no test certificate);
//   - all of the above hold when many goroutines share one RoundTripper,
//     with cancellations, error statuses and bodies closed half read among
//     them, and every response carries its own request's body.
//
// Goroutine leaks are left to goleak in the caller's TestMain.
func Run(t *testing.T, mw transport.Middleware) {
	t.Helper()
	t.Run("RequestNotModified", func(t *testing.T) { requestNotModified(t, mw) })
	t.Run("BodyClosedOnError", func(t *testing.T) { bodyClosedOnError(t, mw) })
	t.Run("StatusIsNotError", func(t *testing.T) { statusIsNotError(t, mw) })
	// RFC 9113 section 8.6: HTTP/2 has no 101 Switching Protocols. Go's
	// HTTP/2 server cannot hijack a stream, and its client refuses a request
	// with an Upgrade header (a WebSocket upgrade to an https URL gets an
	// HTTP/1.1 connection of its own), so there is no HTTP/2 case to run.
	t.Run("Upgrade", func(t *testing.T) { t.Run("HTTP/1.1", func(t *testing.T) { upgrade(t, mw) }) })
	t.Run("Wrapper", func(t *testing.T) { wrapper(t, mw) })
	t.Run("NilNext", func(t *testing.T) { nilNext(t, mw) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, mw) })
}

// eachProtocol serves h over HTTP/1.1 and over HTTP/2 and runs f as a
// subtest for each, named by its protocol.
func eachProtocol(t *testing.T, h http.Handler, f func(*testing.T, testserver.Server)) {
	t.Helper()
	for _, srv := range testserver.Pair(t, h) {
		t.Run(srv.Name, func(t *testing.T) { f(t, srv) })
	}
}

// protoMajor is the major version a response from srv must have, so that a
// case named HTTP/2 cannot pass over HTTP/1.1.
func protoMajor(srv testserver.Server) int {
	if srv.HTTP2 {
		return 2
	}
	return 1
}

func newBase(t *testing.T) *http.Transport {
	t.Helper()
	base, err := transport.New()
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	return base
}

// Body records whether it was closed.
type Body struct {
	io.Reader
	closed atomic.Int32
}

// NewBody returns a body reading s.
func NewBody(s string) *Body { return &Body{Reader: strings.NewReader(s)} }

// Close records the close.
func (b *Body) Close() error {
	b.closed.Add(1)
	return nil
}

// Closed reports whether Close was called.
func (b *Body) Closed() bool { return b.closed.Load() > 0 }

func requestNotModified(t *testing.T, mw transport.Middleware) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	eachProtocol(t, h, func(t *testing.T, srv testserver.Server) {
		rt := mw(srv.Base)

		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "v")
		body := NewBody(`{"a":1}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL+"/apis/x/v1/namespaces/ns/things/a?q=1", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("Content-Type", "application/merge-patch+json")
		wantHeader := req.Header.Clone()
		wantURL := req.URL.String()
		wantHost := req.Host
		header := req.Header

		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NotNil(t, resp)
		assert.Equal(t, protoMajor(srv), resp.ProtoMajor)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())

		assert.Equal(t, http.MethodPatch, req.Method)
		assert.Equal(t, wantURL, req.URL.String())
		assert.Equal(t, wantHost, req.Host)
		assert.Equal(t, wantHeader, req.Header, "headers changed")
		assert.True(t, sameMap(header, req.Header), "header map replaced")
		assert.Equal(t, ctx, req.Context(), "context replaced")
		assert.Same(t, body, req.Body, "body replaced")
		// net/http closes the body on its write goroutine.
		assert.Eventually(t, body.Closed, patience, time.Millisecond, "request body not closed")
	})
}

func sameMap(a, b http.Header) bool {
	a["X-Contract-Probe"] = nil
	_, ok := b["X-Contract-Probe"]
	delete(a, "X-Contract-Probe")
	return ok
}

func bodyClosedOnError(t *testing.T, mw transport.Middleware) {
	// The server takes the request and its body, then drops it without an
	// answer: HTTP/1.1 closes the connection, HTTP/2 resets the stream.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler)
	})
	eachProtocol(t, h, func(t *testing.T, srv testserver.Server) {
		rt := mw(srv.Base)
		scheme, _, _ := strings.Cut(srv.URL, "://")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		refused := scheme + "://" + ln.Addr().String() + "/"
		require.NoError(t, ln.Close()) // nothing listens: connection refused

		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		tests := []struct {
			name string
			ctx  context.Context
			url  string
		}{
			{"connection refused", context.Background(), refused},
			{"cancelled before it is sent", cancelled, refused},
			{"dropped by the server", context.Background(), srv.URL + "/"},
		}
		for _, tt := range tests {
			body := NewBody("payload")
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodPost, tt.url, body)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.Error(t, err, tt.name)
			assert.Nil(t, resp, "%s: a response came with an error", tt.name)
			// net/http may close the body on its write goroutine, after
			// RoundTrip returns.
			assert.Eventually(t, body.Closed, patience, time.Millisecond, "%s: request body not closed", tt.name)
		}
	})
}

func statusIsNotError(t *testing.T, mw transport.Middleware) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	eachProtocol(t, h, func(t *testing.T, srv testserver.Server) {
		rt := mw(srv.Base)
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NotNil(t, resp)
		assert.Equal(t, protoMajor(srv), resp.ProtoMajor)
		assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "boom\n", string(b))
		require.NoError(t, resp.Body.Close())
	})
}

// UpgradeServer starts a loopback server that answers every request with
// 101 Switching Protocols and then echoes each line it reads as
// "echo: <line>", until the client closes. It stops when t ends.
func UpgradeServer(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		defer conn.Close()
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
	t.Cleanup(srv.Close)
	return srv
}

// Upgrade sends an upgrade request for an exec subresource to srv through
// rt and returns the 101 response's body, failing t unless it is an
// io.ReadWriteCloser.
func Upgrade(t testing.TB, rt http.RoundTripper, srv *httptest.Server) io.ReadWriteCloser {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "101 body is %T, not an io.ReadWriteCloser", resp.Body)
	return rwc
}

func upgrade(t *testing.T, mw transport.Middleware) {
	rwc := Upgrade(t, mw(newBase(t)), UpgradeServer(t))
	_, err := rwc.Write([]byte("hello\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(rwc).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo: hello\n", line)
	require.NoError(t, rwc.Close())
}

type counting struct {
	http.RoundTripper
	closes atomic.Int32
}

func (c *counting) CloseIdleConnections() {
	c.closes.Add(1)
	roundtrip.CloseIdleConnections(c.RoundTripper)
}

func wrapper(t *testing.T, mw transport.Middleware) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	eachProtocol(t, h, func(t *testing.T, srv testserver.Server) {
		var conns testserver.Conns
		srv.Base.DialContext = conns.Dial(srv.Base.DialContext)
		base := &counting{RoundTripper: srv.Base}
		rt := mw(base)
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		require.True(t, ok, "%T does not implement WrappedRoundTripper", rt)
		// Walk down as apimachinery's utilnet does, to the base.
		var inner http.RoundTripper = w.WrappedRoundTripper()
		for inner != http.RoundTripper(base) {
			next, ok := inner.(interface{ WrappedRoundTripper() http.RoundTripper })
			require.True(t, ok, "%T does not implement WrappedRoundTripper", inner)
			inner = next.WrappedRoundTripper()
		}
		c, ok := rt.(interface{ CloseIdleConnections() })
		require.True(t, ok, "%T does not implement CloseIdleConnections", rt)

		// A connection in the pool, which the call must reach and close.
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, protoMajor(srv), resp.ProtoMajor)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 1, conns.Dialed())

		// HTTP/2 forgets a finished stream on a goroutine of its own, so the
		// connection may still look busy to the first call.
		var calls atomic.Int32
		closed := func() bool {
			calls.Add(1)
			c.CloseIdleConnections()
			select {
			case <-conns.Closed(0):
				return true
			default:
				return false
			}
		}
		require.Eventually(t, closed, patience, time.Millisecond, "CloseIdleConnections did not close the idle connection")
		assert.Equal(t, calls.Load(), base.closes.Load(), "each CloseIdleConnections must reach the base once")
	})
}

func nilNext(t *testing.T, mw transport.Middleware) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	def := http.DefaultTransport.(*http.Transport)
	defer def.CloseIdleConnections()
	var rt http.RoundTripper
	require.NotPanics(t, func() { rt = mw(nil) })
	assert.True(t, roundtrip.Holds(rt, func(rt http.RoundTripper) bool { return rt == http.DefaultTransport }),
		"a middleware applied to nil must wrap http.DefaultTransport")
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	var resp *http.Response
	require.NotPanics(t, func() { resp, err = rt.RoundTrip(req) }, "a middleware applied to nil panicked on its first request")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "ok", string(b))
}
