package transporttest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// Answerer is an http.RoundTripper that answers every request at once,
// without a network: 200 OK with a short JSON body, a Kubernetes Status.
// Under a middleware, what is left is the middleware's own cost, its
// allocations ([AllocsPerRequest]) or its time in a benchmark, without a
// loopback's scheduling noise.
//
// It hands each request a reused loopback TCP connection through the
// request's httptrace.ClientTrace (GotConn), as net/http's pool does, so
// that a middleware that reads the connection, as pooltrace does, sees a
// real *net.TCPConn with real addresses and costs what it costs on the
// wire. It closes the request's body. Make one with [NewAnswerer]; the
// zero value answers too, but reports no connection. An Answerer is safe
// for concurrent use.
type Answerer struct{ conn net.Conn }

// NewAnswerer returns an Answerer over a loopback TCP connection that is
// closed when tb ends.
func NewAnswerer(tb testing.TB) Answerer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	peer := <-accepted
	tb.Cleanup(func() {
		_ = c.Close()
		if peer != nil {
			_ = peer.Close()
		}
	})
	return Answerer{conn: c}
}

// RoundTrip answers req with 200 OK and never fails.
func (a Answerer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if trace := httptrace.ContextClientTrace(req.Context()); a.conn != nil && trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: a.conn, Reused: true, WasIdle: true, IdleTime: time.Second})
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body:    io.NopCloser(strings.NewReader(`{"kind":"Status","status":"Success"}`)),
		Request: req,
	}, nil
}

// AllocsPerRequest returns the average allocations of one GET through rt,
// its response body read to the end and closed, as testing.AllocsPerRun
// counts them over 200 requests (setting GOMAXPROCS to 1 meanwhile), after
// one that sets up what later ones reuse. A failed request fails tb.
//
// rt is the middleware under test over an [Answerer], and the baseline is
// the Answerer alone: the difference is what the middleware allocates.
// With callerDeadline, each request's context carries a 30-second
// deadline, made within the count: the baseline of a middleware that sets
// the deadline itself (timeout.New), which its caller then need not.
func AllocsPerRequest(tb testing.TB, rt http.RoundTripper, callerDeadline bool) float64 {
	tb.Helper()
	send := func() {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if callerDeadline {
			ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		}
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/api/v1/namespaces/default/pods/p", nil)
		if err != nil {
			tb.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			tb.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	send() // the first request sets up what later ones reuse
	return testing.AllocsPerRun(200, send)
}
