package transporttest_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// closeBody is a request body that records its Close.
type closeBody struct {
	io.Reader
	closed bool
}

func (b *closeBody) Close() error { b.closed = true; return nil }

// TestAnswerer: every request is answered 200 with a Status, its body
// closed, and its trace told of one reused loopback TCP connection, the
// same for every request, concurrent ones included.
func TestAnswerer(t *testing.T) {
	a := transporttest.NewAnswerer(t)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		assert.True(t, info.Reused, "reused")
		assert.True(t, info.WasIdle, "was idle")
		mu.Lock()
		conns = append(conns, info.Conn)
		mu.Unlock()
	}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			body := &closeBody{Reader: strings.NewReader("{}")}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost, "http://127.0.0.1/api/v1/namespaces/default/pods", body)
			if !assert.NoError(t, err) {
				return
			}
			resp, err := a.RoundTrip(req)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.JSONEq(t, `{"kind":"Status","status":"Success"}`, string(b))
			assert.Same(t, req, resp.Request)
			assert.True(t, body.closed, "the request body is closed")
		})
	}
	wg.Wait()
	require.Len(t, conns, 4)
	tcp, ok := conns[0].(*net.TCPConn)
	require.True(t, ok, "a %T, not a *net.TCPConn", conns[0])
	assert.True(t, tcp.LocalAddr().(*net.TCPAddr).IP.IsLoopback())
	for _, c := range conns {
		assert.Same(t, tcp, c, "one connection for every request")
	}
}

// TestAnswererZero: the zero value answers, and tells a trace of no
// connection.
func TestAnswererZero(t *testing.T) {
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { t.Error("GotConn called without a connection") }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, "http://127.0.0.1/", nil)
	require.NoError(t, err)
	resp, err := transporttest.Answerer{}.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestAllocsPerRequest: the count is the middleware's over the baseline:
// one that clones each request allocates more than the Answerer alone, and
// a deadline in the caller's context costs allocations of its own.
func TestAllocsPerRequest(t *testing.T) {
	a := transporttest.NewAnswerer(t)
	bare := transporttest.AllocsPerRequest(t, a, false)
	withDeadline := transporttest.AllocsPerRequest(t, a, true)
	cloning := transporttest.AllocsPerRequest(t, roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return a.RoundTrip(req.Clone(req.Context()))
	}), false)
	t.Logf("bare %v, with the caller's deadline %v, cloning %v allocations per request", bare, withDeadline, cloning)
	assert.Positive(t, bare, "the response and its body")
	assert.Greater(t, withDeadline, bare)
	assert.Greater(t, cloning, bare)
}
