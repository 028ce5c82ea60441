package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// closedAddr returns a loopback address nothing listens on: a dial to it
// is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestNotSentRetriedUntilDeadline: a server restarting behind its address
// refuses connections for longer than three attempts last. A request with
// a deadline is sent again until the server is back, whatever its method,
// and runs once; the server starts after the sixth refusal.
func TestNotSentRetriedUntilDeadline(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			addr := closedAddr(t)
			c := newCounter()
			srv := &http.Server{Handler: c}
			var once sync.Once
			started := make(chan struct{})
			retries := 0
			log := funcr.New(func(_, args string) {
				if !strings.Contains(args, "retrying request") {
					return
				}
				if retries++; retries < 6 {
					return
				}
				once.Do(func() {
					ln, err := net.Listen("tcp", addr)
					if !assert.NoError(t, err) {
						return
					}
					go func() { _ = srv.Serve(ln) }()
					close(started)
				})
			}, funcr.Options{})
			base, err := transport.New()
			require.NoError(t, err)
			defer base.CloseIdleConnections()
			rt := retry.New(retry.WithLogger(log), retry.WithBackoff(noWait))(base)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+"/?id=r", strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err, "the request was retried %d times, then given up before its deadline", retries)
			<-started
			defer func() { _ = srv.Close() }()
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, 1, c.executed("r"))
			assert.Equal(t, 6, retries, "retries past WithMaxAttempts")
		})
	}
}

// TestNotSentPastAttemptsPays: past WithMaxAttempts, a retry of a request
// that reached no server takes a budget token; within it, none. With ten
// tokens, a server that never comes back sees the three attempts the bound
// allows plus one per token (and what the floor adds while they run), then
// the budget stops the request.
func TestNotSentPastAttemptsPays(t *testing.T) {
	addr := closedAddr(t)
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	mw, withdrawn := retry.NewCounted(retry.WithBackoff(noWait), retry.WithBudget(0, 10))
	rt := mw(base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+addr+"/", nil)
	require.NoError(t, err)
	_, err = rt.RoundTrip(req)
	var re *retry.Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, retry.ReasonBudget, re.Reason)
	assert.GreaterOrEqual(t, withdrawn(), 10)
	assert.Equal(t, 3+withdrawn(), re.Attempts, "attempts: three free, then one per token")
	// Every cause is kept; the message names the first and last two
	// earlier attempts.
	assert.Len(t, re.Causes, re.Attempts)
	msg := err.Error()
	assert.Contains(t, msg, " attempt 2: dial tcp "+addr)
	assert.Contains(t, msg, fmt.Sprintf(" attempts 3 to %d left out;", re.Attempts-3))
	assert.Contains(t, msg, fmt.Sprintf(" attempt %d: dial tcp "+addr, re.Attempts-1))
	assert.NotContains(t, msg, " attempt 3: ")
}

// TestNotSentBoundWithoutDeadline: without a deadline, or with retries
// off, WithMaxAttempts bounds a request that reached no server as any
// other.
func TestNotSentBoundWithoutDeadline(t *testing.T) {
	addr := closedAddr(t)
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct {
		name     string
		ctx      context.Context
		attempts int
		want     int
	}{
		{"no deadline", context.Background(), 3, 3},
		{"retries off", ctx, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := retry.New(retry.WithBackoff(noWait), retry.WithMaxAttempts(tt.attempts))(base)
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodGet, "http://"+addr+"/", nil)
			require.NoError(t, err)
			_, err = rt.RoundTrip(req)
			var re *retry.Error
			require.True(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, retry.ReasonAttempts, re.Reason)
			assert.Equal(t, tt.want, re.Attempts)
		})
	}
}

// TestHandshakeResetNotSent: a load balancer that still sends new
// connections to a replica that died accepts them and resets them in the
// TLS handshake, until its health check marks the replica out. The error
// is a read reset, the same as a request cut on its way, but net/http
// hands a request no connection until the handshake is done: the request
// was never written, so a POST is sent again (past WithMaxAttempts, here
// four resets), and runs once, whether the retry learns it from its own
// trace or from pooltrace's error below it. Over plain HTTP the same
// reset comes after the request was written, and the POST is not re-sent.
// A POST reset in the handshake once failed with "not retried: the
// request may have reached the server".
func TestHandshakeResetNotSent(t *testing.T) {
	for _, tt := range []struct {
		name     string
		tls      bool
		below    transport.Middleware
		wantSent int // executions of the POST
	}{
		{"TLS, retry's own trace", true, nil, 1},
		{"TLS, over pooltrace", true, pooltrace.New(), 1},
		{"plain HTTP, written", false, pooltrace.New(), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter()
			srv := httptest.NewUnstartedServer(c)
			srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the resets' handshake errors
			if tt.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			p, err := transporttest.NewProxy(srv.Listener.Addr().String())
			require.NoError(t, err)
			defer func() { _ = p.Close() }()
			p.SetFault(transporttest.ResetBeforeForward)
			retries := 0
			log := funcr.New(func(_, args string) {
				if strings.Contains(args, "retrying request") {
					if retries++; retries == 4 {
						p.SetFault(transporttest.NoFault)
					}
				}
			}, funcr.Options{})
			base := srv.Client().Transport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			var next http.RoundTripper = base
			if tt.below != nil {
				next = tt.below(base)
			}
			rt := retry.New(retry.WithLogger(log), retry.WithBackoff(noWait))(next)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			u := strings.Replace(srv.URL, srv.Listener.Addr().String(), p.Addr(), 1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/?id=r", strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			if tt.wantSent == 0 {
				var re *retry.Error
				require.True(t, errors.As(err, &re), "a written POST was re-sent: %v", err)
				assert.Equal(t, retry.ReasonNotIdempotent, re.Reason)
				assert.Equal(t, retry.MaybeSent, re.Class)
				assert.Zero(t, retries)
				return
			}
			require.NoError(t, err, "after %d retries", retries)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, tt.wantSent, c.executed("r"))
			assert.Equal(t, 4, retries, "one retry per reset")
		})
	}
}
