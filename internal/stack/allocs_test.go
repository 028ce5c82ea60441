package stack_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/internal/stack"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// maxExtraAllocs is what the stack may allocate per successful request
// beyond a bare request with the caller's own deadline. The README's cost
// table shows the figure `make bench` measures on the wire.
const maxExtraAllocs = 6

// answer answers every request at once, as the Overhead benchmarks in
// ./bench do, on a reused loopback TCP connection that it hands the
// request through its trace, as net/http's pool does: the stack's hooks
// then see a real *net.TCPConn, with real addresses.
type answer struct{ conn net.Conn }

func newAnswer(t *testing.T) answer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	peer := <-accepted
	t.Cleanup(func() {
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

// allocsPerRequest is the allocations of one GET through rt, its body read
// and closed; with callerDeadline, the caller's context carries the
// deadline, as a bare transport needs.
func allocsPerRequest(t *testing.T, rt http.RoundTripper, callerDeadline bool) float64 {
	send := func() {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if callerDeadline {
			ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		}
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/api/v1/namespaces/default/pods/p", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	send() // the first request sets up what later ones reuse
	return testing.AllocsPerRun(200, send)
}

// TestAllocs holds the stack to its price: a successful request through it
// allocates at most maxExtraAllocs more than a bare one with the caller's
// deadline. Naming a connection (roundtrip.KeyOf) cost nine allocations per
// attempt when pooltrace did it for every attempt, not only failed ones.
func TestAllocs(t *testing.T) {
	a := newAnswer(t)
	bare := allocsPerRequest(t, a, true)
	tests := []struct {
		name string
		give transport.Middleware
	}{
		{"pooltrace over timeout", transport.Chain(pooltrace.New(), timeout.New(30*time.Second))},
		{"retry over pooltrace over timeout", stack.New(30*time.Second, stack.Options{})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allocsPerRequest(t, tt.give(a), false)
			t.Logf("bare %v, stack %v allocations per request", bare, got)
			require.LessOrEqual(t, got, bare+maxExtraAllocs, "bare %v, stack %v allocations per request", bare, got)
		})
	}
}
