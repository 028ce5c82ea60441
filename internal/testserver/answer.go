// Package testserver holds the root module's test helpers that
// transport/transporttest does not publish: a raw HTTP/2 server for frames
// a real one sends only by accident, and a network-free RoundTripper for
// allocation counts.
package testserver

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

// Answer is a RoundTripper that answers every request at once, without a
// network, for the allocation counts of the root's tests. It hands each request
// a reused loopback TCP connection through the request's trace, as
// net/http's pool does, so that a GotConn hook sees a real *net.TCPConn
// with real addresses and costs what it costs there.
type Answer struct{ conn net.Conn }

// NewAnswer returns an Answer over a loopback connection that is closed
// when tb ends.
func NewAnswer(tb testing.TB) Answer {
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
	return Answer{conn: c}
}

func (a Answer) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: a.conn, Reused: true, WasIdle: true, IdleTime: time.Second})
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body:    io.NopCloser(strings.NewReader(`{"kind":"Status","status":"Success"}`)),
		Request: req,
	}, nil
}

// AllocsPerRequest is the allocations of one GET through rt, its body read
// and closed; with callerDeadline, the caller's context carries the
// deadline, as a bare transport needs.
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
