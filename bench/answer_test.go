package bench_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// answer is a RoundTripper that answers every request at once, without a
// network: the root module's internal testserver.Answer, copied so that
// no more of this module's tests reach into the root's internal packages
// (edge_test.go still does, for internal/repro). It hands each request
// a reused loopback TCP connection through the request's trace, as
// net/http's pool does, so that a GotConn hook sees a real *net.TCPConn
// with real addresses and costs what it costs there.
type answer struct{ conn net.Conn }

// newAnswer returns an answer over a loopback connection that is closed
// when tb ends.
func newAnswer(tb testing.TB) answer {
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
	return answer{conn: c}
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: a.conn, Reused: true, WasIdle: true, IdleTime: time.Second})
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body:    io.NopCloser(strings.NewReader(`{"kind":"Status","status":"Success"}`)),
		Request: req,
	}, nil
}
