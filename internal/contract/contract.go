// Package contract checks that a middleware honours the RoundTripper
// contract, against real loopback servers. Every middleware's tests call
// [Run].
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
	"github.com/kubewire/kubewire/transport"
)

// Run checks middleware mw:
//
//   - the caller's request is not modified (method, URL, headers, context,
//     body);
//   - the request body is closed on success and on every error path;
//   - a response and an error never come together, and a non-2xx status is
//     a response, not an error;
//   - a 101 Switching Protocols response body stays an io.ReadWriteCloser
//     that works both ways;
//   - the RoundTripper implements WrappedRoundTripper, returning what it
//     wraps, and forwards CloseIdleConnections to it.
func Run(t *testing.T, mw transport.Middleware) {
	t.Helper()
	t.Run("RequestNotModified", func(t *testing.T) { requestNotModified(t, mw) })
	t.Run("BodyClosedOnError", func(t *testing.T) { bodyClosedOnError(t, mw) })
	t.Run("StatusIsNotError", func(t *testing.T) { statusIsNotError(t, mw) })
	t.Run("Upgrade", func(t *testing.T) { upgrade(t, mw) })
	t.Run("Wrapper", func(t *testing.T) { wrapper(t, mw) })
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	rt := mw(newBase(t))

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
	assert.Eventually(t, body.Closed, 2*time.Second, time.Millisecond, "request body not closed")
}

func sameMap(a, b http.Header) bool {
	a["X-Contract-Probe"] = nil
	_, ok := b["X-Contract-Probe"]
	delete(a, "X-Contract-Probe")
	return ok
}

func bodyClosedOnError(t *testing.T, mw transport.Middleware) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused

	rt := mw(newBase(t))
	body := NewBody("payload")
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/", body)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.Error(t, err)
	assert.Nil(t, resp, "a response came with an error")
	assert.True(t, body.Closed(), "request body not closed on error")

	// A request cancelled before it is sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body = NewBody("payload")
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/", body)
	require.NoError(t, err)
	resp, err = rt.RoundTrip(req)
	require.Error(t, err)
	assert.Nil(t, resp)
	assert.True(t, body.Closed(), "request body not closed on cancel")
}

func statusIsNotError(t *testing.T, mw transport.Middleware) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	rt := mw(newBase(t))
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "boom\n", string(b))
	require.NoError(t, resp.Body.Close())
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
	base := &counting{RoundTripper: newBase(t)}
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
	c.CloseIdleConnections()
	assert.EqualValues(t, 1, base.closes.Load(), "CloseIdleConnections did not reach the base")
}
