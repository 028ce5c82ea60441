package kubeadapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/contract"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

func TestContract(t *testing.T) {
	contract.Run(t, func(rt http.RoundTripper) http.RoundTripper { return kubeadapter.Wrap()(rt) })
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

func TestApplyMovesTimeoutIntoBudget(t *testing.T) {
	srv := slowServer(t, time.Second)
	cfg := &rest.Config{Host: srv.URL, Timeout: 300 * time.Millisecond}
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithMaxAttempts(1))))
	assert.Zero(t, cfg.Timeout, "http.Client.Timeout would cut every watch")

	start := time.Now()
	err := get(t, cfg, "/api/v1/namespaces/default")
	var te *timeout.Error
	require.True(t, errors.As(err, &te), "%v", err)
	assert.Equal(t, 300*time.Millisecond, te.Budget)
	assert.Less(t, time.Since(start), 900*time.Millisecond)
}

func TestApplyDefaultBudget(t *testing.T) {
	var seen []time.Duration
	srv := slowServer(t, 0)
	cfg := &rest.Config{Host: srv.URL}
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithObserver(func(a pooltrace.Attempt) { seen = append(seen, a.Duration) })))
	require.NoError(t, get(t, cfg, "/version"))
	assert.Len(t, seen, 1)
	assert.Equal(t, 30*time.Second, kubeadapter.DefaultTimeout)
}

func TestApplyTwiceDoesNotStack(t *testing.T) {
	srv := slowServer(t, 0)
	var attempts atomic.Int32
	obs := kubeadapter.WithObserver(func(pooltrace.Attempt) { attempts.Add(1) })
	cfg := &rest.Config{Host: srv.URL, Timeout: time.Second}
	require.NoError(t, kubeadapter.Apply(cfg, obs))
	require.NoError(t, kubeadapter.Apply(cfg, obs))
	cp := rest.CopyConfig(cfg)
	require.NoError(t, kubeadapter.Apply(cp, obs))

	require.NoError(t, get(t, cfg, "/version"))
	require.NoError(t, get(t, cp, "/version"))
	assert.EqualValues(t, 2, attempts.Load(), "one stack per config")
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
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:6443", Timeout: 5 * time.Second}
			assert.EqualError(t, kubeadapter.Apply(cfg, tt.give), tt.want)
			assert.Nil(t, cfg.WrapTransport, "cfg changed on error")
			assert.Equal(t, 5*time.Second, cfg.Timeout)
			assert.EqualError(t, kubeadapter.Check(tt.give), tt.want)

			// Wrap cannot return the error: every request carries it.
			body := contract.NewBody("{}")
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", body)
			require.NoError(t, err)
			_, err = kubeadapter.Wrap(tt.give)(http.DefaultTransport).RoundTrip(req)
			assert.EqualError(t, err, tt.want)
			assert.True(t, body.Closed())
		})
	}
	assert.EqualError(t, kubeadapter.Apply(nil), "kubeadapter: Apply: nil *rest.Config")
	assert.EqualError(t, kubeadapter.Apply(&rest.Config{Timeout: -1}), "kubeadapter: rest.Config.Timeout must not be negative, got -1ns")
	assert.EqualError(t,
		kubeadapter.Apply(&rest.Config{Transport: roundTripperFunc(nil)}, kubeadapter.WithHTTP2Health(time.Second, time.Second)),
		"kubeadapter: WithHTTP2Health needs client-go's transport or an *http.Transport, got rest.Config.Transport of type kubeadapter_test.roundTripperFunc")
}

// TestWatchExempt: a watch outlives the budget; the same watch under a plain
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
