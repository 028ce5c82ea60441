package retry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestWithResendable: the rule given decides which requests that may have
// reached the server are sent again, in place of the methods': here a
// PUT is not, and a POST the rule knows is. Each request's response is
// lost after the server executed it.
func TestWithResendable(t *testing.T) {
	rule := func(req *http.Request) bool { return req.Header.Get("X-Guarded") == "yes" }
	tests := []struct {
		name    string
		method  string
		guarded bool
		sent    int
	}{
		{"PUT the rule refuses", http.MethodPut, false, 1},
		{"POST the rule allows", http.MethodPost, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, retry.New(retry.WithBackoff(noWait), retry.WithResendable(rule)))
			_, err := f.do(context.Background(), http.MethodGet, "warm")
			require.NoError(t, err)
			f.proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			req, err := http.NewRequest(tt.method, f.url+"/x?id=w", strings.NewReader("{}"))
			require.NoError(t, err)
			if tt.guarded {
				req.Header.Set("X-Guarded", "yes")
			}
			resp, err := f.rt.RoundTrip(req)
			if tt.sent == 1 {
				var re *retry.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, retry.ReasonNotIdempotent, re.Reason)
			} else {
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
			}
			assert.Equal(t, tt.sent, f.srv.executed("w"), "copies the server executed")
		})
	}
	assert.EqualError(t, retry.Check(retry.WithResendable(nil)), "retry: WithResendable must not be nil")
}

// TestMaybeApplied: a write whose answer was lost after the server applied
// it is sent again, and the server refuses the second copy (409, 404, 412
// or 422, as a write guarded by a precondition is refused): the refusal goes
// back to the caller marked, observed and logged as maybe applied. An
// answer to a first copy, or another status after a second, is not.
func TestMaybeApplied(t *testing.T) {
	for _, tt := range []struct {
		name   string
		second int
		want   bool
	}{
		{"conflict", http.StatusConflict, true},
		{"not found", http.StatusNotFound, true},
		{"precondition failed", http.StatusPreconditionFailed, true},
		{"unprocessable", http.StatusUnprocessableEntity, true},
		{"ok", http.StatusOK, false},
		{"server error", http.StatusInternalServerError, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			applied := 0
			u, proxy := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Method != http.MethodPut {
					return
				}
				mu.Lock()
				applied++
				n := applied
				mu.Unlock()
				if n > 1 {
					w.WriteHeader(tt.second)
				}
			}))
			base, err := transport.New()
			require.NoError(t, err)
			t.Cleanup(base.CloseIdleConnections)
			var got decisions
			var lines []string
			log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			rt := retry.New(retry.WithBackoff(noWait), retry.WithObserver(got.observe), retry.WithLogger(log))(base)

			warm, err := http.NewRequest(http.MethodGet, u+"/x", nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(warm)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.False(t, retry.MaybeApplied(resp), "a first copy's answer")

			proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			req, err := http.NewRequest(http.MethodPut, u+"/x", strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err = rt.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			mu.Lock()
			assert.Equal(t, 2, applied, "copies the server executed")
			mu.Unlock()
			assert.Equal(t, tt.second, resp.StatusCode)
			assert.Equal(t, tt.want, retry.MaybeApplied(resp))
			want := []retry.Decision{{Attempt: 1, Err: errSentinel, Class: retry.MaybeSent, Retry: true}}
			if tt.want {
				want = append(want, retry.Decision{Attempt: 2, StatusCode: tt.second, Reason: retry.ReasonMaybeApplied})
				assert.Contains(t, strings.Join(lines, "\n"), `"re-sent request refused; an earlier copy may have been applied"`)
			}
			assert.Equal(t, want, got.all)
		})
	}
	t.Run("a read", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
		}))
		t.Cleanup(srv.Close)
		base, err := transport.New()
		require.NoError(t, err)
		t.Cleanup(base.CloseIdleConnections)
		// net/http re-sends a GET whose reused connection failed by
		// itself, so the middleware would never see the failure: the
		// first attempt fails below it, as a connection reset does.
		var calls atomic.Int32
		below := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if calls.Add(1) == 1 {
				return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
			}
			return base.RoundTrip(req)
		})
		var got decisions
		rt := retry.New(retry.WithBackoff(noWait), retry.WithObserver(got.observe))(below)
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		assert.False(t, retry.MaybeApplied(resp), "a read applies nothing")
		assert.Equal(t, []retry.Decision{{Attempt: 1, Err: errSentinel, Class: retry.MaybeSent, Retry: true}}, got.all)
	})
	assert.False(t, retry.MaybeApplied(nil))
	assert.False(t, retry.MaybeApplied(&http.Response{}))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
