package timeout_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestContract(t *testing.T) {
	// A timeout no request of the suite comes near: its concurrent case
	// queues 32 requests, which on a loaded machine can wait past 2s.
	transporttest.TestMiddleware(t, timeout.New(30*time.Second))
}

// servers starts h on HTTP/1.1 and on HTTP/2 (TLS).
func servers(t *testing.T, h http.HandlerFunc) []transporttest.Server {
	t.Helper()
	return transporttest.NewServers(t, h).All()
}

// wait sleeps d or until the client goes away.
func wait(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func get(ctx context.Context, rt http.RoundTripper, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return (&http.Client{Transport: rt}).Do(req)
}

func requireTimeout(t *testing.T, err error, phase timeout.Phase, limit time.Duration) {
	t.Helper()
	require.Error(t, err)
	var te *timeout.Error
	require.True(t, errors.As(err, &te), "want *timeout.Error, got %T: %v", err, err)
	assert.Equal(t, phase, te.Phase)
	assert.Equal(t, limit, te.Limit)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "errors.Is(err, context.DeadlineExceeded) is false for %v", err)
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	assert.True(t, ne.Timeout())
	if ue, ok := err.(*url.Error); ok {
		assert.True(t, ue.Timeout(), "url.Error.Timeout() is false")
	}
}

func TestSlowHeaders(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, func(w http.ResponseWriter, r *http.Request) {
		if wait(r, 5*time.Second) {
			_, _ = io.WriteString(w, "late")
		}
	}) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			rt := timeout.New(2 * time.Second)(s.Base)
			start := time.Now()
			resp, err := get(context.Background(), rt, s.URL)
			elapsed := time.Since(start)
			assert.Nil(t, resp)
			requireTimeout(t, err, timeout.PhaseHeaders, 2*time.Second)
			assert.GreaterOrEqual(t, elapsed, 2*time.Second)
			assert.Contains(t, err.Error(), "request timeout of 2s exceeded")
			assert.Contains(t, err.Error(), "waiting for response headers")
		})
	}
}

// trickle sends headers at once, then one byte every 100ms for 5s.
func trickle(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for i := 0; i < 50; i++ {
		if !wait(r, 100*time.Millisecond) {
			return
		}
		if _, err := w.Write([]byte{'x'}); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

func TestSlowBody(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, trickle) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			rt := timeout.New(2 * time.Second)(s.Base)
			start := time.Now()
			resp, err := get(context.Background(), rt, s.URL)
			require.NoError(t, err)
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			elapsed := time.Since(start)
			requireTimeout(t, err, timeout.PhaseBody, 2*time.Second)
			assert.Greater(t, n, int64(5), "the body was cut before it trickled")
			assert.GreaterOrEqual(t, elapsed, 2*time.Second)
		})
	}
}

// stream writes a line every 100ms, n times, flushing each.
func stream(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		for i := 0; i < n; i++ {
			if !wait(r, 100*time.Millisecond) {
				return
			}
			fmt.Fprintf(w, "{\"type\":\"MODIFIED\",\"n\":%d}\n", i)
			_ = rc.Flush()
		}
	}
}

func TestLongRunningNotCut(t *testing.T) {
	t.Parallel()
	paths := []string{
		"/api/v1/namespaces/ns/pods?watch=true",
		"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes?watch=1&resourceVersion=5",
		"/api/v1/namespaces/ns/pods/p/log?follow=true",
	}
	for _, s := range servers(t, stream(15)) {
		for _, p := range paths {
			t.Run(s.Name+p, func(t *testing.T) {
				t.Parallel()
				rt := timeout.New(500 * time.Millisecond)(s.Base)
				start := time.Now()
				resp, err := get(context.Background(), rt, s.URL+p)
				require.NoError(t, err)
				defer resp.Body.Close()
				lines := 0
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines++
				}
				require.NoError(t, sc.Err(), "the stream was cut")
				assert.Equal(t, 15, lines)
				assert.Greater(t, time.Since(start), time.Second, "the stream outlived the timeout")
			})
		}
	}
}

func TestOrdinaryStreamIsCut(t *testing.T) {
	t.Parallel()
	// The same stream without watch=true is an ordinary request: its body
	// is bounded by the timeout.
	for _, s := range servers(t, stream(15)) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			rt := timeout.New(500 * time.Millisecond)(s.Base)
			resp, err := get(context.Background(), rt, s.URL+"/api/v1/namespaces/ns/pods")
			require.NoError(t, err)
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			requireTimeout(t, err, timeout.PhaseBody, 500*time.Millisecond)
		})
	}
}

func TestLongRunningHeadersBounded(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, func(w http.ResponseWriter, r *http.Request) {
		wait(r, 5*time.Second)
	}) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			rt := timeout.New(300 * time.Millisecond)(s.Base)
			_, err := get(context.Background(), rt, s.URL+"/api/v1/pods?watch=true")
			requireTimeout(t, err, timeout.PhaseHeaders, 300*time.Millisecond)
		})
	}
}

func TestStallWatchdog(t *testing.T) {
	t.Parallel()
	// Twelve events 100ms apart, then silence.
	h := func(w http.ResponseWriter, r *http.Request) {
		stream(12)(w, r)
		wait(r, 10*time.Second)
	}
	for _, s := range servers(t, h) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			// 800ms for the headers: a TLS handshake under -race on a
			// busy machine took 350ms; the stream lasts 1.2s, past it.
			rt := timeout.New(800*time.Millisecond, timeout.WithStallTimeout(400*time.Millisecond))(s.Base)
			start := time.Now()
			resp, err := get(context.Background(), rt, s.URL+"/api/v1/pods?watch=true")
			require.NoError(t, err)
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			elapsed := time.Since(start)
			requireTimeout(t, err, timeout.PhaseStalled, 400*time.Millisecond)
			assert.Greater(t, n, int64(0))
			// The 800ms timeout did not cut the stream (the phase says the
			// watchdog did), and the watchdog waited its 400ms. Not "1.2s of
			// events plus 400ms": on a loaded machine the server's 100ms
			// cadence can itself pause for 400ms, and cutting it then is right.
			assert.GreaterOrEqual(t, elapsed, 400*time.Millisecond)
			assert.Contains(t, err.Error(), "no progress for 400ms")
		})
	}
}

func TestCallerDeadlineWins(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, func(w http.ResponseWriter, r *http.Request) {
		wait(r, 3*time.Second)
	}) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			rt := timeout.New(2 * time.Second)(s.Base)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := get(ctx, rt, s.URL)
			require.Error(t, err)
			assert.True(t, errors.Is(err, context.DeadlineExceeded))
			var te *timeout.Error
			assert.False(t, errors.As(err, &te), "the caller's deadline is not the middleware's: %v", err)
		})
	}
}

func TestContextWithTimeout(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, func(w http.ResponseWriter, r *http.Request) {
		if wait(r, 600*time.Millisecond) {
			_, _ = io.WriteString(w, "ok")
		}
	}) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			// A shorter timeout for one call.
			rt := timeout.New(10 * time.Second)(s.Base)
			// The server answers after 600ms, within the middleware's 10s:
			// only the call's 200ms timeout can fail the call.
			_, err := get(timeout.ContextWithTimeout(context.Background(), 200*time.Millisecond), rt, s.URL)
			requireTimeout(t, err, timeout.PhaseHeaders, 200*time.Millisecond)

			// No timeout for one call.
			rt = timeout.New(200 * time.Millisecond)(s.Base)
			resp, err := get(timeout.ContextWithoutTimeout(context.Background()), rt, s.URL)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, "ok", string(b))
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		give transport.Middleware
		ctx  context.Context
		want string
	}{
		{"zero timeout", timeout.New(0), context.Background(), "timeout: the timeout of timeout.New must be positive, got 0s"},
		{"negative timeout", timeout.New(-time.Second), context.Background(), "timeout: the timeout of timeout.New must be positive, got -1s"},
		{"zero stall", timeout.New(time.Second, timeout.WithStallTimeout(0)), context.Background(), "timeout: WithStallTimeout must be positive, got 0s"},
		{"nil observer", timeout.New(time.Second, timeout.WithObserver(nil)), context.Background(), "timeout: WithObserver must not be nil"},
		{"zero per-call timeout", timeout.New(time.Second), timeout.ContextWithTimeout(context.Background(), 0), "timeout: the timeout of timeout.ContextWithTimeout must be positive, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { transporttest.TestConfigError(t, tt.ctx, tt.give, tt.want) })
	}
	assert.EqualError(t, timeout.Check(0), "timeout: the timeout of timeout.New must be positive, got 0s")
	assert.NoError(t, timeout.Check(time.Second, timeout.WithStallTimeout(time.Minute)))
}

func TestUpgradeOutlivesTimeout(t *testing.T) {
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	rwc := transporttest.Upgrade(t, timeout.New(100*time.Millisecond)(base), transporttest.NewUpgradeServer(t))
	defer rwc.Close()
	time.Sleep(300 * time.Millisecond) // three timeouts: the upgraded stream must survive them
	_, err = rwc.Write([]byte("ping\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(rwc).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo: ping\n", line)
}

func TestLongRunning(t *testing.T) {
	tests := []struct {
		give   string
		header http.Header
		want   bool
	}{
		{give: "/api/v1/namespaces/ns/pods", want: false},
		{give: "/api/v1/namespaces/ns/pods?watch=true", want: true},
		{give: "/api/v1/namespaces/ns/pods?watch=1", want: true},
		{give: "/api/v1/namespaces/ns/pods?watch=", want: true},
		{give: "/api/v1/namespaces/ns/pods?watch=false", want: false},
		{give: "/api/v1/namespaces/ns/pods?watch=False", want: false},
		{give: "/api/v1/namespaces/ns/pods?watch=0", want: false},
		{give: "/api/v1/watch/namespaces/ns/pods", want: true},
		{give: "/apis/apps/v1/watch/deployments", want: true},
		{give: "/api/v1/namespaces/ns/pods/p/log?follow=true", want: true},
		{give: "/api/v1/namespaces/ns/pods/p/log?follow=false", want: false},
		{give: "/api/v1/namespaces/ns/pods/p/log", want: false},
		{give: "/api/v1/namespaces/ns/pods/p?follow=true", want: false},
		{give: "/api/v1/namespaces/ns/pods/p/exec?command=sh", want: true},
		{give: "/api/v1/namespaces/ns/pods/p/attach", want: true},
		{give: "/api/v1/namespaces/ns/pods/p/portforward", want: true},
		{give: "/api/v1/namespaces/ns/services/s/proxy/metrics", want: true},
		{give: "/api/v1/nodes/n/proxy/stats", want: true},
		{give: "/api/v1/proxy/namespaces/ns/services/s", want: true},
		{give: "/api/v1/namespaces/exec/pods", want: false},
		{give: "/api/v1/namespaces/proxy", want: false},
		{give: "/api/v1/namespaces/ns/status", want: false},
		{give: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/exec", want: false},
		{give: "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/sb/status", want: false},
		{give: "/k8s/clusters/c-1/api/v1/namespaces/ns/pods/p/exec", want: true},
		{give: "/k8s/clusters/c-1/api/v1/namespaces/ns/pods/p", want: false},
		{give: "/version", want: false},
		{give: "/healthz?watch=true", want: true},
		// The query as url.ParseQuery reads it: escapes decoded, the first
		// value of a key, pairs with a bad escape dropped.
		{give: "/api/v1/pods?limit=500&watch=1", want: true},
		{give: "/api/v1/pods?wat%63h=true", want: true},
		{give: "/api/v1/pods?watch", want: true},
		{give: "/api/v1/pods?watch=false&watch=true", want: false},
		{give: "/api/v1/pods?watch=%zz", want: false},
		{give: "/api/v1/pods?watch=%zz&watch=1", want: true},
		{give: "/api/v1/pods?watch=1;", want: false},
		{give: "/api/v1/pods?watch=false;x=1&watch=1", want: true},
		{give: "/api/v1/namespaces/ns/pods/p/log?follow=tr%75e", want: true},
		// More segments than the classifier keeps on the stack.
		{give: "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/z/0/1/2/3/4/5/api/v1/namespaces/ns/pods/p/exec", want: true},
		{give: "/api/v1/namespaces/ns/pods/p", header: http.Header{"Connection": {"keep-alive, Upgrade"}}, want: true},
		{give: "/api/v1/namespaces/ns/pods/p", header: http.Header{"Connection": {"keep-alive"}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:6443"+tt.give, nil)
			require.NoError(t, err)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			assert.Equal(t, tt.want, timeout.LongRunning(req))
		})
	}
	assert.False(t, timeout.LongRunning(nil))
}

func TestErrorMessage(t *testing.T) {
	e := &timeout.Error{Limit: 2 * time.Second, Elapsed: 2001 * time.Millisecond, Phase: timeout.PhaseBody, Err: io.ErrUnexpectedEOF}
	assert.Equal(t, "timeout: request timeout of 2s exceeded after 2.001s reading the response body: unexpected EOF", e.Error())
	assert.True(t, errors.Is(e, io.ErrUnexpectedEOF))
	assert.True(t, errors.Is(e, context.DeadlineExceeded))
	assert.False(t, errors.Is(e, context.Canceled))
	assert.True(t, strings.HasPrefix(timeout.Phase(9).String(), "Phase("))
}

// TestObserver: a timeout that runs out is reported once, with its phase,
// before the request fails; a request within its timeout reports nothing.
func TestObserver(t *testing.T) {
	t.Parallel()
	for _, s := range servers(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/headers":
			wait(r, 5*time.Second)
		case "/body":
			trickle(w, r)
		}
	}) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan timeout.Exceeded, 10)
			rt := timeout.New(300*time.Millisecond, timeout.WithObserver(func(e timeout.Exceeded) { seen <- e }))(s.Base)
			for _, tc := range []struct {
				path  string
				phase timeout.Phase
			}{{"/", 0}, {"/headers", timeout.PhaseHeaders}, {"/body", timeout.PhaseBody}} {
				resp, err := get(context.Background(), rt, s.URL+tc.path)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				if tc.phase == 0 {
					require.NoError(t, err)
					assert.Empty(t, seen)
					continue
				}
				requireTimeout(t, err, tc.phase, 300*time.Millisecond)
				require.Len(t, seen, 1, tc.path)
				e := <-seen
				assert.Equal(t, tc.phase, e.Phase)
				assert.Equal(t, 300*time.Millisecond, e.Limit)
				assert.GreaterOrEqual(t, e.Elapsed, 300*time.Millisecond)
				assert.Equal(t, tc.path, e.Request.URL.Path)
			}
		})
	}
}
