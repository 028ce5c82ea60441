package kubeadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// retryMetric stands in for the rest_client_request_retries_total counter
// a program registers with client-go's tools/metrics.
type retryMetric struct {
	mu     sync.Mutex
	counts map[string]int // "code method host"
}

func (m *retryMetric) IncrementRetry(_ context.Context, code, method, host string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[code+" "+method+" "+host]++
}

func (m *retryMetric) get(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[key]
}

// retryMetrics is client-go's retry metric for the tests, installed by
// TestMain (client-go's Register takes effect once per process). A test
// points it at a retryMetric of its own.
type retryMetrics struct{ current atomic.Pointer[retryMetric] }

func (r *retryMetrics) IncrementRetry(ctx context.Context, code, method, host string) {
	if m := r.current.Load(); m != nil {
		m.IncrementRetry(ctx, code, method, host)
	}
}

var clientGoRetries = &retryMetrics{}

// registerRetryMetric counts client-go's retry metric for the test.
func registerRetryMetric(t *testing.T) *retryMetric {
	m := &retryMetric{counts: map[string]int{}}
	clientGoRetries.current.Store(m)
	t.Cleanup(func() { clientGoRetries.current.CompareAndSwap(m, nil) })
	return m
}

// TestOneRetryLayer: against the real API server behind a proxy that
// resets every connection, a clientset GET after Apply is attempted
// retry.DefaultMaxAttempts times in all (one connection each, counted at the
// proxy), fewer than stock client-go, which retries a GET ten times a
// second apart; before kubeadapter.Error, client-go started a new round of
// kubewire's attempts on each of its own retries. client-go's retry metric
// counts kubewire's retries. The proxy resets each connection as the API
// server answers its first bytes, so no attempt reaches the handler: the
// counts are attempts, the load a failing server sees.
func TestOneRetryLayer(t *testing.T) {
	type result struct {
		attempts int
		host     string
		err      error
	}
	get := func(t *testing.T, apply bool, opts ...kubeadapter.Option) result {
		cfg, proxy := kubetest.Proxied(t, env.Config(t))
		if apply {
			opts = append(opts, kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 })))
			require.NoError(t, kubeadapter.Apply(cfg, opts...))
		}
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		proxy.SetFault(transporttest.ResetAfterResponse)
		before := proxy.Accepted()
		_, err = cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		require.Error(t, err)
		return result{proxy.Accepted() - before, proxy.Addr(), err}
	}
	retries := registerRetryMetric(t)
	applied := get(t, true)
	t.Logf("after Apply: %d attempts: %v", applied.attempts, applied.err)
	assert.Equal(t, retry.DefaultMaxAttempts, applied.attempts, "attempts after Apply")
	assert.Equal(t, retry.DefaultMaxAttempts-1, retries.get("<error> GET "+applied.host), "rest_client_request_retries_total")
	stock := get(t, false)
	t.Logf("stock client-go: %d attempts", stock.attempts)
	assert.Less(t, applied.attempts, stock.attempts, "fewer attempts than stock client-go")

	// What client-go decides on, and what users still see.
	err := applied.err
	notLostConnection(t, err)
	var ke *kubeadapter.Error
	require.ErrorAs(t, err, &ke)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, retry.ReasonAttempts, re.Reason)
	assert.Len(t, re.Causes, retry.DefaultMaxAttempts)
	var pe *pooltrace.Error
	assert.ErrorAs(t, err, &pe, "the causes' types stay reachable")
	assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF),
		"errors.Is sees the causes: %v", re.Causes)

	// A call middleware leaves one retry layer whatever it does with the
	// error. Before kubeadapter.Error looked through the wrapping,
	// client-go found ECONNRESET in a wrapped error and retried ten more
	// times, each retried by kubewire again: 33 attempts in 11.8s; before
	// the stack noted the retry error below the call middleware, so it did
	// for a formatted error, whose text says "connection reset by peer",
	// and for the bare cause handed back.
	for _, mw := range []struct {
		name  string
		m     func(error) error
		words string // what the error says, where the middleware's words stay
	}{
		{"wraps it", func(err error) error { return &auditError{fmt.Errorf("audit: %w", err)} }, "audit: retry: GET failed after"},
		{"formats it with %v", func(err error) error { return fmt.Errorf("audit: %v", err) }, "audit: retry: GET failed after"},
		{"formats it with %s", func(err error) error { return errors.New("audit: " + err.Error()) }, "audit: retry: GET failed after"},
		{"replaces it with a cause", func(err error) error {
			var op *net.OpError
			if errors.As(err, &op) {
				return op
			}
			return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
		}, ""},
	} {
		t.Run("a call middleware that "+mw.name, func(t *testing.T) {
			got := get(t, true, kubeadapter.WithStackOptions(stack.WithCallMiddleware(mapErrors(mw.m))))
			t.Logf("%d attempts: %v", got.attempts, got.err)
			assert.Equal(t, retry.DefaultMaxAttempts, got.attempts, "attempts")
			err := got.err
			notLostConnection(t, err)
			var ke *kubeadapter.Error
			require.ErrorAs(t, err, &ke)
			var re *retry.Error
			require.ErrorAs(t, err, &re, "the retry error stays reachable")
			assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF),
				"errors.Is sees the causes: %v", re.Causes)
			assert.Equal(t, retry.ReasonAttempts, re.Reason)
			if mw.words != "" {
				assert.Contains(t, err.Error(), mw.words, "the middleware's words stay")
			}
		})
	}
	audited := get(t, true, kubeadapter.WithStackOptions(stack.WithCallMiddleware(mapErrors(func(err error) error {
		return &auditError{fmt.Errorf("audit: %w", err)}
	}))))
	var ae *auditError
	assert.ErrorAs(t, audited.err, &ae, "the middleware's types stay reachable")
}

// notLostConnection asserts that none of client-go's checks for a lost
// connection, on which it retries a GET, takes err for one.
func notLostConnection(t *testing.T, err error) {
	t.Helper()
	assert.False(t, utilnet.IsConnectionReset(err), "IsConnectionReset")
	assert.False(t, utilnet.IsProbableEOF(err), "IsProbableEOF")
	assert.False(t, utilnet.IsHTTP2ConnectionLost(err), "IsHTTP2ConnectionLost")
}

// mapErrors is a call middleware that hands on f(err) for each error.
func mapErrors(f func(error) error) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err != nil {
				return nil, f(err)
			}
			return resp, nil
		})
	}
}

type auditError struct{ err error }

func (e *auditError) Error() string { return e.err.Error() }
func (e *auditError) Unwrap() error { return e.err }

// TestRetriesOffLeavesClientGo: with kubewire's retries off
// (retry.WithMaxAttempts(1)), client-go retries the GET as it would
// without kubewire; the error is the retry error itself.
func TestRetriesOffLeavesClientGo(t *testing.T) {
	cfg, proxy := kubetest.Proxied(t, env.Config(t))
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithMaxAttempts(1))))
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	proxy.SetFault(transporttest.ResetAfterResponse)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	before := proxy.Accepted()
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.Error(t, err)
	assert.GreaterOrEqual(t, proxy.Accepted()-before, 2, "client-go retried after its one-second wait")
	var ke *kubeadapter.Error
	assert.False(t, errors.As(err, &ke), "%v", err)
}

// TestErrorHidesLostConnection: for each error net/http and the HTTP/2
// transports report for a lost connection, the *kubeadapter.Error around
// the retry error it ended is not one client-go's checks take for a lost
// connection, and keeps it reachable.
func TestErrorHidesLostConnection(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, cause := range []error{
		reset,
		io.EOF,
		io.ErrUnexpectedEOF,
		net.ErrClosed,
		fmt.Errorf("write tcp: %w", net.ErrClosed),
		errors.New("http: can't write HTTP request on broken connection"),
		errors.New("http2: client connection lost"),
		errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\""),
		&pooltrace.Error{Err: reset},
	} {
		t.Run(cause.Error(), func(t *testing.T) {
			require.True(t, utilnet.IsConnectionReset(cause) || utilnet.IsProbableEOF(cause) || utilnet.IsHTTP2ConnectionLost(cause), "client-go retries %v", cause)
			re := &retry.Error{Method: "GET", Attempts: 2, Reason: retry.ReasonAttempts, Causes: []error{cause, cause}}
			err := error(&kubeadapter.Error{Retry: re})
			notLostConnection(t, err)
			assert.ErrorIs(t, err, cause)
			var got *retry.Error
			require.ErrorAs(t, err, &got)
			assert.Same(t, re, got)
			assert.True(t, strings.HasPrefix(err.Error(), "retry: GET failed after 2 attempts (attempts exhausted): "), err.Error())
		})
	}
}
