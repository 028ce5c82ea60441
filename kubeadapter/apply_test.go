package kubeadapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestContract(t *testing.T) {
	transporttest.TestMiddleware(t, kubeadapter.Wrap())
}

// TestWrapNilClones: with an option that clones the base transport, Wrap
// applied to nil clones http.DefaultTransport, as the other middleware
// send through it, and leaves the original as it was.
func TestWrapNilClones(t *testing.T) {
	def := http.DefaultTransport.(*http.Transport)
	idle := def.IdleConnTimeout
	rt := kubeadapter.Wrap(kubeadapter.WithIdleConnTimeout(time.Minute))(nil)
	var clone *http.Transport
	for next := http.RoundTripper(rt); next != nil; {
		if t, ok := next.(*http.Transport); ok {
			clone = t
			break
		}
		w, ok := next.(interface{ WrappedRoundTripper() http.RoundTripper })
		require.True(t, ok, "%T hides what is below it", next)
		next = w.WrappedRoundTripper()
	}
	require.NotNil(t, clone)
	assert.NotSame(t, def, clone, "http.DefaultTransport itself was given to the stack")
	assert.Equal(t, time.Minute, clone.IdleConnTimeout)
	assert.Equal(t, idle, def.IdleConnTimeout, "http.DefaultTransport was changed")

	srv := slowServer(t, 0)
	defer clone.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func slowServer(t *testing.T, d time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, cfg *rest.Config, path string) error {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, cfg.Host+path, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func TestApplyMovesConfigTimeout(t *testing.T) {
	srv := slowServer(t, time.Second)
	cfg := &rest.Config{Host: srv.URL, Timeout: 300 * time.Millisecond}
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithMaxAttempts(1))))
	assert.Zero(t, cfg.Timeout, "http.Client.Timeout would cut every watch")

	// The server answers after a second: only the 300ms timeout can fail
	// the call, and the error says which timeout did.
	err := get(t, cfg, "/api/v1/namespaces/default")
	var te *timeout.Error
	require.True(t, errors.As(err, &te), "%v", err)
	assert.Equal(t, 300*time.Millisecond, te.Limit)
}

// TestApplyDefaultTimeout: the timeout is WithTimeout's, else the config's
// Timeout, else DefaultTimeout. It shows without waiting for it: a caller's
// deadline shorter than the timeout is left to bound the request alone,
// while a longer one gets the timeout's own timer, which the wrapper below
// the stack sees as a context with a Done channel of its own.
func TestApplyDefaultTimeout(t *testing.T) {
	srv := slowServer(t, 0)
	tests := []struct {
		name    string
		timeout time.Duration
		opts    []kubeadapter.Option
		want    time.Duration
	}{
		{"DefaultTimeout", 0, nil, kubeadapter.DefaultTimeout},
		{"rest.Config.Timeout", 2 * time.Minute, nil, 2 * time.Minute},
		{"WithTimeout over rest.Config.Timeout", 2 * time.Minute, []kubeadapter.Option{kubeadapter.WithTimeout(10 * time.Second)}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, probe := range []struct {
				deadline time.Duration
				ownTimer bool
			}{
				{tt.want * 9 / 10, false},
				{tt.want * 11 / 10, true},
			} {
				cfg := &rest.Config{Host: srv.URL, Timeout: tt.timeout}
				var below <-chan struct{}
				cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
					return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
						below = req.Context().Done()
						return rt.RoundTrip(req)
					})
				})
				require.NoError(t, kubeadapter.Apply(cfg, tt.opts...))
				c, err := rest.HTTPClientFor(cfg)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), probe.deadline)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/version", nil)
				require.NoError(t, err)
				resp, err := c.Do(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				cancel()
				c.CloseIdleConnections()
				assert.Equal(t, probe.ownTimer, below != ctx.Done(), "caller deadline %v", probe.deadline)
			}
		})
	}
}

func TestApplyTwiceDoesNotStack(t *testing.T) {
	srv := slowServer(t, 0)
	var attempts atomic.Int32
	obs := kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: func(pooltrace.Attempt) { attempts.Add(1) }})
	cfg := &rest.Config{Host: srv.URL, Timeout: time.Second}
	require.NoError(t, kubeadapter.Apply(cfg, obs))
	require.NoError(t, kubeadapter.Apply(cfg, obs))
	cp := rest.CopyConfig(cfg)
	require.NoError(t, kubeadapter.Apply(cp, obs))

	require.NoError(t, get(t, cfg, "/version"))
	require.NoError(t, get(t, cp, "/version"))
	assert.EqualValues(t, 2, attempts.Load(), "one stack per config")
}

// TestApplyAgainOverAPlainWrapper: a wrapper without WrappedRoundTripper,
// added after Apply, hides the stack from a second Apply of a copy (what
// driver.New does with a config its caller applied), which then installs
// one of its own. At run time only the outermost stack acts: against a
// server that resets every connection, one GET makes
// retry.DefaultMaxAttempts connections, as under one Apply, not their
// square. Before the fix: 9.
func TestApplyAgainOverAPlainWrapper(t *testing.T) {
	p, err := transporttest.NewProxy(strings.TrimPrefix(slowServer(t, 0).URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.SetFault(transporttest.ResetAfterResponse)
	noBackoff := kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 }))
	var attempts atomic.Int32
	obs := kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: func(pooltrace.Attempt) { attempts.Add(1) }})

	cfg := &rest.Config{Host: "http://" + p.Addr()}
	require.False(t, kubeadapter.Applied(cfg))
	require.NoError(t, kubeadapter.Apply(cfg, noBackoff, obs))
	require.True(t, kubeadapter.Applied(cfg))
	var plain atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			plain.Add(1)
			return rt.RoundTrip(req)
		})
	})
	cp := rest.CopyConfig(cfg)
	assert.False(t, kubeadapter.Applied(cp), "the plain wrapper hides the stack")
	require.NoError(t, kubeadapter.Apply(cp, noBackoff, obs))

	before := p.Accepted()
	require.Error(t, get(t, cp, "/version"))
	assert.Equal(t, retry.DefaultMaxAttempts, p.Accepted()-before, "connections for one GET")
	assert.EqualValues(t, retry.DefaultMaxAttempts, attempts.Load(), "attempts observed")
	assert.EqualValues(t, retry.DefaultMaxAttempts, plain.Load(), "each attempt passes the plain wrapper once")
}

// TestAllocs: a successful request through the applied stack allocates at
// most 9 more than a bare one with the caller's deadline: the stack's 7
// (the stack package's TestAllocs) and 2 for the mark that keeps a second,
// hidden stack out of the way (the context value and the request's copy).
func TestAllocs(t *testing.T) {
	a := transporttest.NewAnswerer(t)
	bare := transporttest.AllocsPerRequest(t, a, true)
	got := transporttest.AllocsPerRequest(t, kubeadapter.Wrap()(a), false)
	t.Logf("bare %v, applied %v allocations per request", bare, got)
	require.LessOrEqual(t, got, bare+9)
}

// TestOtherChainKeepsItsStack: a wrapper of the config that calls another
// applied client with the request's context, here one of another server,
// leaves that client its own stack: its 200 ms timeout cuts the slow
// answer. The mark of the acting stack once switched every stack below it
// off, whatever chain it belonged to.
func TestOtherChainKeepsItsStack(t *testing.T) {
	slow := slowServer(t, 3*time.Second)
	other := &rest.Config{Host: slow.URL}
	require.NoError(t, kubeadapter.Apply(other, kubeadapter.WithTimeout(200*time.Millisecond)))
	oc, err := rest.HTTPClientFor(other)
	require.NoError(t, err)
	defer oc.CloseIdleConnections()
	var inner error
	cfg := &rest.Config{Host: slowServer(t, 0).URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			r, err := http.NewRequestWithContext(req.Context(), http.MethodGet, slow.URL+"/version", nil)
			if err == nil {
				var resp *http.Response
				if resp, err = oc.Do(r); err == nil {
					resp.Body.Close()
				}
			}
			inner = err
			return rt.RoundTrip(req)
		})
	})
	require.NoError(t, kubeadapter.Apply(cfg))
	require.NoError(t, get(t, cfg, "/version"))
	var te *timeout.Error
	assert.ErrorAs(t, inner, &te, "the other client's own timeout: %v", inner)
}

// TestApplyRunsNoWrapper: Apply looks for its stack without running the
// config's wrappers. A wrapper that takes what it wraps for client-go's
// *http.Transport, as it may under plain client-go, neither panics inside
// Apply nor runs more often than client-go runs it.
func TestApplyRunsNoWrapper(t *testing.T) {
	srv := slowServer(t, 0)
	var calls atomic.Int32
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		calls.Add(1)
		return rt.(*http.Transport)
	})
	require.NoError(t, kubeadapter.Apply(cfg))
	require.NoError(t, kubeadapter.Apply(cfg))
	require.NoError(t, kubeadapter.Apply(rest.CopyConfig(cfg)))
	assert.Zero(t, calls.Load(), "Apply ran the config's wrapper")
	require.NoError(t, get(t, cfg, "/version"))
	assert.EqualValues(t, 1, calls.Load(), "client-go runs it once")
}

// TestApplyTwiceClonesQuietly: a second Apply of a config whose stack
// clones the base transport finds the first stack and leaves it; looking
// for it does not make the clone log that it does not apply, and the
// clone's one warning is not used up.
func TestApplyTwiceClonesQuietly(t *testing.T) {
	srv := slowServer(t, 0)
	var log logLines
	cfg := &rest.Config{Host: srv.URL}
	opts := []kubeadapter.Option{kubeadapter.WithIdleConnTimeout(time.Minute), kubeadapter.WithLogger(log.logger())}
	require.NoError(t, kubeadapter.Apply(cfg, opts...))
	require.NoError(t, kubeadapter.Apply(cfg, opts...))
	require.NoError(t, get(t, cfg, "/version"))
	assert.Empty(t, log.lines())
}

// TestApplyKeepsWrappers: the config's own wrappers still run, in their
// order, below the kubewire stack.
func TestApplyKeepsWrappers(t *testing.T) {
	srv := slowServer(t, 0)
	var mu sync.Mutex
	var order []string
	wrapper := func(name string) func(http.RoundTripper) http.RoundTripper {
		return func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				mu.Lock()
				traced := httptrace.ContextClientTrace(req.Context()) != nil
				order = append(order, name)
				mu.Unlock()
				assert.True(t, traced, "%s runs below the kubewire stack", name)
				return rt.RoundTrip(req)
			})
		}
	}
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(wrapper("a"))
	cfg.Wrap(wrapper("b"))
	require.NoError(t, kubeadapter.Apply(cfg))
	require.NoError(t, get(t, cfg, "/version"))
	assert.Equal(t, []string{"b", "a"}, order, "client-go runs the last wrapper first")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestApplyRejectsBadOptions(t *testing.T) {
	tests := []struct {
		give kubeadapter.Option
		want string
	}{
		{kubeadapter.WithTimeout(0), "kubeadapter: WithTimeout must be positive, got 0s"},
		{kubeadapter.WithTimeout(-time.Second), "kubeadapter: WithTimeout must be positive, got -1s"},
		{kubeadapter.WithStallTimeout(0), "kubeadapter: WithStallTimeout must be positive, got 0s"},
		{kubeadapter.WithHTTP2Health(0, time.Second), "kubeadapter: WithHTTP2Health readIdle must be positive, got 0s"},
		{kubeadapter.WithHTTP2Health(time.Second, -time.Second), "kubeadapter: WithHTTP2Health pingTimeout must be positive, got -1s"},
		{kubeadapter.WithRetryOptions(retry.WithMaxAttempts(0)), "kubeadapter: WithRetryOptions: retry: WithMaxAttempts must be at least 1, got 0"},
		{kubeadapter.WithIdleConnTimeout(0), "kubeadapter: WithIdleConnTimeout must be positive, got 0s"},
		{kubeadapter.WithObserver(nil), "kubeadapter: WithObserver must not be nil"},
		{kubeadapter.WithStackOptions(stack.WithRetryOptions(retry.WithMaxAttempts(0))), "kubeadapter: WithStackOptions: retry: WithMaxAttempts must be at least 1, got 0"},
		{kubeadapter.WithStackOptions(stack.WithTimeoutOptions(timeout.WithStallTimeout(-1))), "kubeadapter: WithStackOptions: timeout: WithStallTimeout must be positive, got -1ns"},
		{kubeadapter.WithObserver((*pointerObserver)(nil)), "kubeadapter: WithObserver must not be nil, got a nil *kubeadapter_test.pointerObserver"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:6443", Timeout: 5 * time.Second}
			assert.EqualError(t, kubeadapter.Apply(cfg, tt.give), tt.want)
			assert.Nil(t, cfg.WrapTransport, "cfg changed on error")
			assert.Equal(t, 5*time.Second, cfg.Timeout)
			assert.EqualError(t, kubeadapter.Check(tt.give), tt.want)

			// Wrap cannot return the error: every request carries it.
			transporttest.TestConfigError(t, context.Background(), kubeadapter.Wrap(tt.give), tt.want)
		})
	}
	assert.EqualError(t, kubeadapter.Apply(nil), "kubeadapter: Apply: nil *rest.Config")
	assert.EqualError(t, kubeadapter.Apply(&rest.Config{Timeout: -1}), "kubeadapter: rest.Config.Timeout must not be negative, got -1ns")
}

// pointerObserver is an Observer with pointer receivers, like
// metrics.Metrics: a nil one is a typed nil.
type pointerObserver struct{ n int }

func (o *pointerObserver) ObserveAttempt(pooltrace.Attempt) { o.n++ }
func (o *pointerObserver) ObserveDecision(retry.Decision)   { o.n++ }
func (o *pointerObserver) ObserveExceeded(timeout.Exceeded) { o.n++ }

// TestStackOptions: under client-go, call middleware given through
// WithStackOptions sees a call once and attempt middleware every attempt.
func TestStackOptions(t *testing.T) {
	cfg := &rest.Config{Host: transporttest.RefusedURL(t)}
	var calls, attempts atomic.Int32
	count := func(n *atomic.Int32) transport.Middleware {
		return func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				n.Add(1)
				return rt.RoundTrip(req)
			})
		}
	}
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 })),
		kubeadapter.WithStackOptions(stack.WithCallMiddleware(count(&calls)), stack.WithAttemptMiddleware(count(&attempts)))))
	require.Error(t, get(t, cfg, "/api/v1/pods"))
	assert.EqualValues(t, 1, calls.Load())
	assert.EqualValues(t, retry.DefaultMaxAttempts, attempts.Load())
}

// TestRetryExemptionsAddUp: a user's retry.WithExempt adds to
// kubeadapter's exemption of long-running requests; it does not replace
// it. Against a server that refuses connections, a request retried makes
// retry.DefaultMaxAttempts attempts, an exempt one makes one.
func TestRetryExemptionsAddUp(t *testing.T) {
	cfg := &rest.Config{Host: transporttest.RefusedURL(t)}
	var attempts atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			attempts.Add(1)
			return rt.RoundTrip(req)
		})
	})
	healthz := func(r *http.Request) bool { return r.URL.Path == "/healthz" }
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithExempt(healthz), retry.WithBackoff(func(int) time.Duration { return 0 }))))
	tests := []struct {
		give string
		want int32
	}{
		{"/api/v1/pods?watch=true", 1},
		{"/api/v1/namespaces/ns/pods/p/log?follow=true", 1},
		{"/healthz", 1},
		{"/api/v1/pods", retry.DefaultMaxAttempts},
	}
	for _, tt := range tests {
		attempts.Store(0)
		require.Error(t, get(t, cfg, tt.give))
		assert.Equal(t, tt.want, attempts.Load(), "attempts for %s", tt.give)
	}
}

// TestWatchExempt: a watch outlives the timeout; the same watch under a plain
// rest.Config.Timeout is cut.
func TestWatchExempt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		for i := 0; i < 8; i++ {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "{}\n")
			_ = rc.Flush()
		}
	}))
	defer srv.Close()

	plain := &rest.Config{Host: srv.URL, Timeout: 300 * time.Millisecond}
	err := get(t, plain, "/api/v1/pods?watch=true")
	require.Error(t, err, "rest.Config.Timeout cuts the watch")

	applied := rest.CopyConfig(plain)
	require.NoError(t, kubeadapter.Apply(applied))
	require.NoError(t, get(t, applied, "/api/v1/pods?watch=true"))

	// An ordinary request with the same body is bounded.
	err = get(t, applied, "/api/v1/pods")
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}
