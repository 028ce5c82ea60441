package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestFullJitterAnyRetry: a Backoff is a func of an int, and a caller may
// hand it zero or a negative number; it must not panic, and every wait
// stays within [0, max].
func TestFullJitterAnyRetry(t *testing.T) {
	b := retry.FullJitter(100*time.Millisecond, time.Second)
	for _, n := range []int{math.MinInt, -1, 0, 1, 2, 62, 63, 64, math.MaxInt} {
		var d time.Duration
		require.NotPanics(t, func() { d = b(n) }, "FullJitter(100ms, 1s)(%d)", n)
		assert.GreaterOrEqual(t, d, time.Duration(0), "retry %d", n)
		assert.LessOrEqual(t, d, time.Second, "retry %d", n)
	}
	for range 100 {
		assert.Less(t, b(0), 100*time.Millisecond, "retry 0 waits as the first retry does")
	}
}

// countingBase counts the attempts that reach the base transport.
type countingBase struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// TestExemptionsAddUp: every WithExempt given exempts its requests, as
// observers add up; a later one does not undo an earlier one (kubeadapter
// exempts long-running requests and appends the user's options).
func TestExemptionsAddUp(t *testing.T) {
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	cb := &countingBase{next: base}
	byPath := func(p string) func(*http.Request) bool {
		return func(r *http.Request) bool { return r.URL.Path == p }
	}
	rt := retry.New(retry.WithBackoff(noWait), retry.WithExempt(byPath("/a")), retry.WithExempt(nil), retry.WithExempt(byPath("/b")))(cb)
	u := transporttest.RefusedURL(t)
	tests := []struct {
		give string
		want int32
	}{
		{"/a", 1}, {"/b", 1}, {"/c", retry.DefaultMaxAttempts},
	}
	for _, tt := range tests {
		cb.n.Store(0)
		req, err := http.NewRequest(http.MethodGet, u+tt.give, nil)
		require.NoError(t, err)
		_, err = rt.RoundTrip(req)
		require.Error(t, err)
		assert.Equal(t, tt.want, cb.n.Load(), "attempts for %s", tt.give)
	}
}

// TestConfigErrorBelow: a middleware below retry built with invalid
// options fails every request before anything is sent. That is no failed
// attempt: the error comes out exactly as that middleware said it, not
// wrapped as a failed attempt, and neither retry nor pooltrace reports an
// attempt.
func TestConfigErrorBelow(t *testing.T) {
	var decided, attempted atomic.Int32
	for _, tt := range []struct {
		name string
		ctx  context.Context
		mw   transport.Middleware
		want string
	}{
		{"timeout.New(0)", context.Background(), timeout.New(0), "timeout: the timeout of timeout.New must be positive, got 0s"},
		{"ContextWithTimeout(ctx, 0)", timeout.ContextWithTimeout(context.Background(), -time.Second), timeout.New(time.Second),
			"timeout: the timeout of timeout.ContextWithTimeout must be positive, got -1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := transport.Chain(
				retry.New(retry.WithObserver(func(retry.Decision) { decided.Add(1) })),
				pooltrace.New(pooltrace.WithObserver(func(pooltrace.Attempt) { attempted.Add(1) })),
				tt.mw,
			)(http.DefaultTransport)
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodGet, transporttest.RefusedURL(t), nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.Nil(t, resp)
			require.EqualError(t, err, tt.want)
			var ce *transport.ConfigError
			assert.ErrorAs(t, err, &ce)
			assert.Zero(t, decided.Load(), "retry decided on an attempt that was never made")
			assert.Zero(t, attempted.Load(), "pooltrace reported an attempt that was never made")
		})
	}
}

// failingBody yields some bytes, then fails with err, as a caller's reader
// can (a truncated upload, a source whose own deadline passed).
type failingBody struct {
	left int
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, b.err
	}
	n := min(len(p), b.left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	b.left -= n
	return n, nil
}

func (b *failingBody) Close() error { return nil }

// TestBodyErrorNotRetried: when the caller's request body fails, the
// connection did not: an idempotent PUT is not re-sent as another partial
// upload, and the error says the body failed, keeping its cause.
func TestBodyErrorNotRetried(t *testing.T) {
	causes := []error{io.ErrUnexpectedEOF, context.DeadlineExceeded, errors.New("disk on fire")}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})
	for _, srv := range transporttest.NewServers(t, h).All() {
		for _, cause := range causes {
			t.Run(srv.Name+"/"+cause.Error(), func(t *testing.T) {
				var bodies atomic.Int32
				var got []retry.Decision
				rt := retry.New(retry.WithBackoff(noWait), retry.WithObserver(func(d retry.Decision) { got = append(got, d) }))(srv.Base)
				req, err := http.NewRequest(http.MethodPut, srv.URL+"/upload", nil)
				require.NoError(t, err)
				req.GetBody = func() (io.ReadCloser, error) {
					bodies.Add(1)
					return &failingBody{left: 64 << 10, err: cause}, nil
				}
				req.Body, _ = req.GetBody()
				req.ContentLength = 128 << 10
				resp, err := rt.RoundTrip(req)
				require.Nil(t, resp)
				require.Error(t, err)
				assert.EqualValues(t, 1, bodies.Load(), "the upload was sent again: %v", err)
				var re *retry.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, 1, re.Attempts)
				assert.Equal(t, retry.NotRetryable, re.Class)
				assert.ErrorIs(t, err, cause)
				var be *retry.BodyError
				assert.ErrorAs(t, err, &be)
				assert.Contains(t, err.Error(), "request body: "+cause.Error())
				if assert.Len(t, got, 1) {
					assert.Equal(t, retry.ReasonNotRetryable, got[0].Reason)
				}
			})
		}
	}
}

// statusServer answers every request with status and Retry-After ra, and
// counts them.
func statusServer(t *testing.T, status int, ra string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", ra)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestStatusRetryWaitBounded: without a caller deadline, a Retry-After
// longer than WithMaxRetryAfter allows is not slept out: the status goes
// back to the caller at once, which can read the header itself.
func TestStatusRetryWaitBounded(t *testing.T) {
	tests := []struct {
		name string
		opts []retry.Option
		ra   string
	}{
		{"default bound, an hour asked", nil, "3600"},
		{"bound of 2s, 3s asked", []retry.Option{retry.WithMaxRetryAfter(2 * time.Second)}, "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, n := statusServer(t, http.StatusServiceUnavailable, tt.ra)
			base, err := transport.New()
			require.NoError(t, err)
			defer base.CloseIdleConnections()
			var got []retry.Decision
			opts := append([]retry.Option{retry.WithStatusRetry(), retry.WithObserver(func(d retry.Decision) { got = append(got, d) })}, tt.opts...)
			rt := retry.New(opts...)(base)
			// The hang guard: a wait that is slept out ends here with an
			// error instead of a response.
			ctx, cancel := context.WithCancelCause(context.Background())
			guard := time.AfterFunc(30*time.Second, func() { cancel(errors.New("the Retry-After was slept out")) })
			defer guard.Stop()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, tt.ra, resp.Header.Get("Retry-After"))
			assert.EqualValues(t, 1, n.Load())
			if assert.Len(t, got, 1) {
				assert.Equal(t, retry.ReasonRetryAfter, got[0].Reason)
				assert.False(t, got[0].Retry)
			}
		})
	}
}

// TestStatusRetryCanceledInWait: the observer hears of a retry before its
// wait, and a caller that gives up during the wait gets an error that
// still says which status asked for it.
func TestStatusRetryCanceledInWait(t *testing.T) {
	srv, n := statusServer(t, http.StatusTooManyRequests, "20")
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	observerCanceled := errors.New("the observer was told of the retry")
	guard := time.AfterFunc(15*time.Second, func() { cancel(errors.New("the observer was not told before the wait")) })
	defer guard.Stop()
	var got []retry.Decision
	rt := retry.New(retry.WithStatusRetry(), retry.WithObserver(func(d retry.Decision) {
		got = append(got, d)
		if d.Retry {
			cancel(observerCanceled)
		}
	}))(base)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.Nil(t, resp)
	require.Error(t, err)
	assert.ErrorIs(t, context.Cause(ctx), observerCanceled)
	assert.EqualValues(t, 1, n.Load())
	var se *retry.StatusError
	require.ErrorAs(t, err, &se, "the error keeps the status: %v", err)
	assert.Equal(t, http.StatusTooManyRequests, se.StatusCode)
	assert.Equal(t, 20*time.Second, se.RetryAfter)
	assert.Contains(t, err.Error(), "429 Too Many Requests")
	assert.Contains(t, err.Error(), "Retry-After 20s")
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, retry.ReasonCanceled, re.Reason)
	require.Len(t, got, 2)
	assert.Equal(t, retry.Decision{Request: got[0].Request, Attempt: 1, StatusCode: 429, Retry: true, Wait: 20 * time.Second}, got[0])
	assert.Equal(t, retry.ReasonCanceled, got[1].Reason)
}

// FuzzBodyError sends PUTs whose body, the caller's reader, fails after
// any number of bytes with any of the errors a reader returns (a reset
// included, which from the connection would be retried), or ends early,
// over HTTP/1.1 and HTTP/2, with a known length or chunked. Whatever the
// input: the body is read once (never re-sent as another partial upload);
// a failure of the reader comes back as a *retry.BodyError holding its
// cause; and a body that neither fails nor ends early is sent whole.
func FuzzBodyError(f *testing.F) {
	srvs := transporttest.NewServers(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	causes := []error{nil, io.ErrUnexpectedEOF, context.DeadlineExceeded, syscall.ECONNRESET, errors.New("disk on fire"), io.EOF}
	f.Add(uint16(0), uint8(1), false, false)
	f.Add(uint16(4096), uint8(3), true, false)
	f.Add(uint16(70), uint8(5), false, true)
	f.Add(uint16(1), uint8(0), true, true)
	f.Fuzz(func(t *testing.T, failAt uint16, kind uint8, h2, chunked bool) {
		srv := srvs.HTTP1
		if h2 {
			srv = srvs.HTTP2
		}
		cause := causes[int(kind)%len(causes)]
		n := int(failAt) * 4 // up to 256 KiB, past any buffer
		length := int64(n) + 16
		var bodies atomic.Int32
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/upload", nil)
		require.NoError(t, err)
		req.GetBody = func() (io.ReadCloser, error) {
			bodies.Add(1)
			if cause == nil {
				return io.NopCloser(strings.NewReader(strings.Repeat("x", int(length)))), nil
			}
			return &failingBody{left: n, err: cause}, nil
		}
		req.Body, _ = req.GetBody()
		bodies.Store(0)
		req.ContentLength = length
		if chunked {
			req.ContentLength = -1
		}
		rt := retry.New(retry.WithBackoff(noWait))(srv.Base)
		resp, err := rt.RoundTrip(req)
		assert.Zero(t, bodies.Load(), "the body was sent again (err %v)", err)
		switch {
		case cause == nil || (cause == io.EOF && chunked):
			// Whole, or ended by EOF where no length was promised.
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
		case cause == io.EOF:
			// Shorter than its ContentLength.
			require.Error(t, err)
			assert.Nil(t, resp)
			var be *retry.BodyError
			require.ErrorAs(t, err, &be)
			assert.ErrorIs(t, be, io.ErrUnexpectedEOF)
			assert.Contains(t, be.Error(), fmt.Sprintf("request body: ended after %d of its ContentLength %d bytes", n, length))
		default:
			require.Error(t, err)
			assert.Nil(t, resp)
			var be *retry.BodyError
			require.ErrorAs(t, err, &be)
			assert.ErrorIs(t, be, cause)
		}
	})
}
