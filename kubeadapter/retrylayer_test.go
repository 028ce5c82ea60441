package kubeadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	clientgometrics "k8s.io/client-go/tools/metrics"

	"github.com/kubewire/kubewire/internal/faultproxy"
	"github.com/kubewire/kubewire/internal/kubetest"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
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

// registerRetryMetric installs m as client-go's retry metric for the
// test. It sets the variable: client-go's Register takes effect once per
// process, and controller-runtime, which envtest brings in, has used it.
func registerRetryMetric(t *testing.T) *retryMetric {
	m := &retryMetric{counts: map[string]int{}}
	old := clientgometrics.RequestRetry
	clientgometrics.RequestRetry = m
	t.Cleanup(func() { clientgometrics.RequestRetry = old })
	return m
}

// TestOneRetryLayer: against the real API server behind a proxy that
// resets every connection, a clientset GET after Apply is executed
// retry.DefaultMaxAttempts times in all, where stock client-go would start
// a new round of kubewire's attempts on each of its own ten retries; and
// client-go's retry metric counts kubewire's retries.
func TestOneRetryLayer(t *testing.T) {
	retries := registerRetryMetric(t)
	cfg, proxy := kubetest.Proxied(t, env.Config(t))
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return 0 }))))
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	proxy.SetFault(faultproxy.ResetAfterResponse)
	before := proxy.Accepted()
	start := time.Now()
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("error after %v: %v", took, err)

	assert.Equal(t, retry.DefaultMaxAttempts, proxy.Accepted()-before, "connections, one per attempt")
	assert.Less(t, took, time.Second, "client-go waits a second before each retry of its own; it made none")
	assert.Equal(t, retry.DefaultMaxAttempts-1, retries.get("<error> GET "+proxy.Addr()), "rest_client_request_retries_total")

	// What client-go decides on, and what users still see.
	assert.False(t, utilnet.IsConnectionReset(err), "IsConnectionReset")
	assert.False(t, utilnet.IsProbableEOF(err), "IsProbableEOF")
	assert.False(t, utilnet.IsHTTP2ConnectionLost(err), "IsHTTP2ConnectionLost")
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
			assert.False(t, utilnet.IsConnectionReset(err), "IsConnectionReset")
			assert.False(t, utilnet.IsProbableEOF(err), "IsProbableEOF")
			assert.False(t, utilnet.IsHTTP2ConnectionLost(err), "IsHTTP2ConnectionLost")
			assert.ErrorIs(t, err, cause)
			var got *retry.Error
			require.ErrorAs(t, err, &got)
			assert.Same(t, re, got)
			assert.True(t, strings.HasPrefix(err.Error(), "retry: GET failed after 2 attempts (attempts exhausted): "), err.Error())
		})
	}
}
