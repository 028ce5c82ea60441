package retry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// decisions records what WithObserver reports, without the request and
// the error, which the tests check apart.
type decisions struct {
	mu  sync.Mutex
	all []retry.Decision
}

func (d *decisions) observe(x retry.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.Request == nil {
		panic("Decision without its request")
	}
	x.Request = nil
	if x.Err != nil {
		x.Err = errSentinel
	}
	d.all = append(d.all, x)
}

var errSentinel = context.Canceled // stands for "an error"

// TestObserver: every retry and every end of retrying is reported once,
// with the class of the failure or the status, and the reason. The
// failures come on a reused connection, after the request was forwarded:
// net/http re-sends a GET there by itself, so the idempotent request is a
// PUT.
func TestObserver(t *testing.T) {
	tests := []struct {
		name   string
		method string
		opts   []retry.Option
		want   []retry.Decision
	}{
		{
			name: "retried reset", method: http.MethodPut,
			want: []retry.Decision{{Attempt: 1, Err: errSentinel, Class: retry.MaybeSent, Retry: true}},
		},
		{
			name: "refused non-idempotent write", method: http.MethodPost,
			want: []retry.Decision{{Attempt: 1, Err: errSentinel, Class: retry.MaybeSent, Reason: retry.ReasonNotIdempotent}},
		},
		{
			name: "budget refusal", method: http.MethodPut, opts: []retry.Option{retry.WithBudget(0, 0)},
			want: []retry.Decision{{Attempt: 1, Err: errSentinel, Class: retry.MaybeSent, Reason: retry.ReasonBudget}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, also decisions
			f := newFixture(t, retry.New(append(tt.opts, retry.WithBackoff(noWait), retry.WithObserver(got.observe), retry.WithObserver(also.observe))...))
			_, err := f.do(context.Background(), http.MethodGet, "warm")
			require.NoError(t, err)
			assert.Empty(t, got.all, "a request that succeeds at once decides nothing")
			f.proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			_, _ = f.do(context.Background(), tt.method, "x")
			assert.Equal(t, tt.want, got.all)
			assert.Equal(t, tt.want, also.all, "observers add up")
		})
	}
}

// TestObserverStatus: WithStatusRetry reports a retried status, and the
// status it gives back when no attempt is left.
func TestObserverStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	base, err := transport.New()
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	var got decisions
	rt := retry.New(retry.WithStatusRetry(), retry.WithMaxAttempts(2), retry.WithObserver(got.observe))(base)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, []retry.Decision{
		{Attempt: 1, StatusCode: 503, Retry: true},
		{Attempt: 2, StatusCode: 503, Reason: retry.ReasonAttempts},
	}, got.all)
}
