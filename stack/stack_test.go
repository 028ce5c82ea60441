package stack_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestContract(t *testing.T) {
	transporttest.TestMiddleware(t, stack.New(30*time.Second))
}

// TestOrder walks the stack from the outside in.
func TestOrder(t *testing.T) {
	base := &http.Transport{}
	rt := stack.New(time.Second)(base)
	var pkgs []string
	for {
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			break
		}
		pkgs = append(pkgs, reflect.TypeOf(rt).Elem().PkgPath())
		rt = w.WrappedRoundTripper()
	}
	assert.Equal(t, []string{
		"github.com/kubewire/kubewire/retry",
		"github.com/kubewire/kubewire/pooltrace",
		"github.com/kubewire/kubewire/timeout",
		"github.com/kubewire/kubewire/retry",
	}, pkgs)
	assert.Same(t, base, rt)
}

// marker is a middleware that counts the requests it sees and marks each
// one's context with its count, under its own name; it records whether the
// marker named after, if any, had marked the request before it.
type marker struct {
	name, after string
	count       atomic.Int32
	below       atomic.Bool // the request carried after's mark
}

type markKey string

func (m *marker) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if m.after != "" && req.Context().Value(markKey(m.after)) != nil {
			m.below.Store(true)
		}
		n := m.count.Add(1)
		return next.RoundTrip(req.WithContext(context.WithValue(req.Context(), markKey(m.name), n)))
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// holdsFirst starts a server that holds its first request until the
// client gives up on it and answers the others at once, and returns the
// count of requests it received. It stops when t ends.
func holdsFirst(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestCallAndAttemptMiddleware: call middleware sees a call once, attempt
// middleware sees each attempt, and pooltrace's and timeout's observers
// find the attempt's context on the request they report.
func TestCallAndAttemptMiddleware(t *testing.T) {
	srv, calls := holdsFirst(t)
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()

	call, call2 := &marker{name: "call"}, &marker{name: "call2", after: "call"}
	attempt := &marker{name: "attempt", after: "call2"}
	var mu sync.Mutex
	var seen []any
	// Long enough for the second attempt on a busy machine: the first
	// waits it out.
	rt := stack.New(time.Second,
		stack.WithCallMiddleware(call.wrap),
		stack.WithCallMiddleware(nil),
		stack.WithCallMiddleware(call2.wrap),
		stack.WithAttemptMiddleware(attempt.wrap),
		stack.WithAttemptMiddleware(nil),
		stack.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 })),
		stack.WithPooltraceOptions(pooltrace.WithObserver(func(a pooltrace.Attempt) {
			mu.Lock()
			seen = append(seen, a.Request.Context().Value(markKey("attempt")))
			mu.Unlock()
		})),
		stack.WithTimeoutOptions(timeout.WithObserver(func(e timeout.Exceeded) {
			mu.Lock()
			seen = append(seen, e.Request.Context().Value(markKey("attempt")))
			mu.Unlock()
		})),
	)(base)

	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	assert.EqualValues(t, 1, call.count.Load(), "one call")
	assert.EqualValues(t, 1, call2.count.Load(), "one call, second call middleware")
	assert.EqualValues(t, 2, attempt.count.Load(), "two attempts")
	assert.EqualValues(t, 2, calls.Load(), "the server saw both")
	assert.True(t, call2.below.Load(), "the first call middleware given is outermost")
	assert.True(t, attempt.below.Load(), "attempt middleware is below call middleware")
	mu.Lock()
	defer mu.Unlock()
	// timeout reports the first attempt's deadline, pooltrace the first
	// attempt's end, then the second attempt's.
	assert.Equal(t, []any{int32(1), int32(1), int32(2)}, seen)
}

// TestEachAttemptItsOwnTimeout: the server holds the first GET past the
// timeout and answers the second at once. The first attempt runs out of
// its own timeout, on a connection pooltrace names; retry sends the second,
// which gets a whole timeout again, is traced again, and succeeds.
func TestEachAttemptItsOwnTimeout(t *testing.T) {
	srv, calls := holdsFirst(t)

	var mu sync.Mutex
	var attempts []pooltrace.Attempt
	var exceeded []timeout.Exceeded
	const limit = 200 * time.Millisecond
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	rt := stack.New(limit,
		stack.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 })),
		stack.WithPooltraceOptions(pooltrace.WithObserver(func(a pooltrace.Attempt) {
			mu.Lock()
			attempts = append(attempts, a)
			mu.Unlock()
		})),
		stack.WithTimeoutOptions(timeout.WithObserver(func(e timeout.Exceeded) {
			mu.Lock()
			exceeded = append(exceeded, e)
			mu.Unlock()
		})),
	)(base)

	start := time.Now()
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "ok", string(b))
	assert.GreaterOrEqual(t, time.Since(start), limit, "the first attempt waited out its timeout")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, exceeded, 1, "only the first attempt ran out")
	assert.Equal(t, limit, exceeded[0].Limit)
	require.Len(t, attempts, 2, "pooltrace traced each attempt")
	var te *timeout.Error
	require.ErrorAs(t, attempts[0].Err, &te, "pooltrace saw the first attempt's timeout")
	assert.NoError(t, attempts[1].Err)
	assert.EqualValues(t, 2, calls.Load())
}

// TestNewBadInput: a nil option is skipped, and an invalid deadline fails
// every request with a *transport.ConfigError naming it, without sending
// it, as timeout.New does.
func TestNewBadInput(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
	}))
	defer srv.Close()
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()

	resp, err := (&http.Client{Transport: stack.New(time.Second, nil)(base)}).Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	for _, d := range []time.Duration{0, -time.Second} {
		_, err = (&http.Client{Transport: stack.New(d)(base)}).Get(srv.URL)
		var ce *transport.ConfigError
		require.ErrorAs(t, err, &ce, "d=%v", d)
		assert.Contains(t, err.Error(), d.String())
	}
	assert.EqualValues(t, 1, calls.Load(), "the invalid stacks sent nothing")

	assert.NoError(t, stack.Check(time.Second, nil))
	assert.EqualError(t, stack.Check(0), "timeout: the timeout of timeout.New must be positive, got 0s")
	assert.EqualError(t, stack.Check(time.Second, stack.WithRetryOptions(retry.WithMaxAttempts(0))), "retry: WithMaxAttempts must be at least 1, got 0")
	assert.EqualError(t, stack.Check(time.Second, stack.WithPooltraceOptions(pooltrace.WithVerbosity(-1))), "pooltrace: WithVerbosity must not be negative, got -1")
}

// TestNoReplayOfAttemptHeader: an attempt middleware that sets an
// Idempotency-Key header on a POST, below retry, does not make net/http
// re-send the POST by itself when the resend rule refuses it: the server
// applies it and closes the reused connection unanswered, and the POST
// reaches it once, header and all, and the caller gets retry's error. The
// guard at the bottom of the stack holds the rule; before it, net/http
// sent a second copy and the caller was told the POST succeeded. Under
// retry's default rule, for which the header makes the POST idempotent,
// net/http still re-sends it.
func TestNoReplayOfAttemptHeader(t *testing.T) {
	tests := []struct {
		name string
		opts []retry.Option
		want int32 // POSTs the server receives
	}{
		{"a rule that refuses it", []retry.Option{retry.WithResendable(func(*http.Request) bool { return false })}, 1},
		{"the default rule", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Method != http.MethodPost {
					return
				}
				assert.Equal(t, []string{"k1"}, r.Header["Idempotency-Key"], "the header reached the server")
				if posts.Add(1) == 1 {
					// Applied, then the connection is closed unanswered.
					panic(http.ErrAbortHandler)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			base, err := transport.New()
			require.NoError(t, err)
			t.Cleanup(base.CloseIdleConnections)
			setKey := func(next http.RoundTripper) http.RoundTripper {
				return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
					r := req.Clone(req.Context())
					r.Header.Set("Idempotency-Key", "k1")
					return next.RoundTrip(r)
				})
			}
			client := &http.Client{Transport: stack.New(10*time.Second,
				stack.WithRetryOptions(append([]retry.Option{retry.WithBackoff(func(int) time.Duration { return 0 })}, tt.opts...)...),
				stack.WithAttemptMiddleware(setKey))(base)}

			resp, err := client.Get(srv.URL)
			require.NoError(t, err, "warms the connection the POST reuses")
			require.NoError(t, resp.Body.Close())
			resp, err = client.Post(srv.URL, "application/json", strings.NewReader(`{}`))
			assert.Equal(t, tt.want, posts.Load(), "POSTs the server received")
			if tt.want == 2 {
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				return
			}
			var re *retry.Error
			require.ErrorAs(t, err, &re, "the caller is not told the POST succeeded")
			assert.Equal(t, retry.ReasonNotIdempotent, re.Reason, "%v", err)
		})
	}
}
