package transport_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/internal/conntrack"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type recorder struct {
	name  string
	order *[]string
	next  http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	*r.order = append(*r.order, r.name)
	return r.next.RoundTrip(req)
}

func named(name string, order *[]string) transport.Middleware {
	return func(next http.RoundTripper) http.RoundTripper { return &recorder{name, order, next} }
}

func TestChainFirstIsOutermost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()

	var order []string
	rt := transport.Chain(named("a", &order), nil, named("b", &order), named("c", &order))(base)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, []string{"a", "b", "c"}, order)

	assert.Same(t, base, transport.Chain()(base), "an empty chain is the identity")
	assert.Same(t, base, transport.Chain(nil, nil)(base))
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		give transport.Option
		want string
	}{
		{transport.WithIdleConnTimeout(0), "transport: WithIdleConnTimeout must be positive, got 0s"},
		{transport.WithIdleConnTimeout(-time.Second), "transport: WithIdleConnTimeout must be positive, got -1s"},
		{transport.WithHTTP2ReadIdleTimeout(0), "transport: WithHTTP2ReadIdleTimeout must be positive, got 0s"},
		{transport.WithHTTP2PingTimeout(-5 * time.Millisecond), "transport: WithHTTP2PingTimeout must be positive, got -5ms"},
		{transport.WithDialTimeout(0), "transport: WithDialTimeout must be positive, got 0s"},
		{transport.WithTLSHandshakeTimeout(0), "transport: WithTLSHandshakeTimeout must be positive, got 0s"},
		{transport.WithMaxIdleConnsPerHost(0), "transport: WithMaxIdleConnsPerHost must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			rt, err := transport.New(tt.give)
			assert.Nil(t, rt)
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tr, err := transport.New()
	require.NoError(t, err)
	assert.Equal(t, transport.DefaultIdleConnTimeout, tr.IdleConnTimeout)
	assert.Less(t, tr.IdleConnTimeout, 60*time.Second, "below the AWS ALB idle timeout")
	assert.NotNil(t, tr.Proxy, "proxy from the environment, as go-cleanhttp does")
	assert.Zero(t, tr.ResponseHeaderTimeout, "no connection-level response timeout")
	require.NotNil(t, tr.Protocols)
	assert.True(t, tr.Protocols.HTTP1())
	assert.True(t, tr.Protocols.HTTP2())
	assert.Equal(t, &http.HTTP2Config{
		SendPingTimeout: transport.DefaultHTTP2ReadIdleTimeout,
		PingTimeout:     transport.DefaultHTTP2PingTimeout,
	}, tr.HTTP2)

	tr, err = transport.New(transport.WithoutHTTP2(), transport.WithMaxIdleConnsPerHost(7), transport.WithIdleConnTimeout(time.Second))
	require.NoError(t, err)
	assert.Equal(t, 7, tr.MaxIdleConnsPerHost)
	assert.Equal(t, time.Second, tr.IdleConnTimeout)
	assert.False(t, tr.ForceAttemptHTTP2)
	assert.False(t, tr.Protocols.HTTP2())
}

// TestNewNegotiates: against a server that offers h2, New speaks HTTP/2
// unless WithoutHTTP2 says otherwise, with a TLS config of the caller's
// (which on its own keeps net/http from attempting HTTP/2).
func TestNewNegotiates(t *testing.T) {
	srv, tlsConfig := h2Server(t)

	tests := []struct {
		name string
		give []transport.Option
		want string
	}{
		{"default", nil, "HTTP/2.0"},
		{"WithoutHTTP2", []transport.Option{transport.WithoutHTTP2()}, "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := transport.New(append(tt.give, transport.WithTLSConfig(tlsConfig))...)
			require.NoError(t, err)
			defer tr.CloseIdleConnections()
			_, proto := reused(t, tr, srv.URL)
			assert.Equal(t, tt.want, proto)
		})
	}
}

// reused sends a GET and reports whether it went out on a reused connection.
func reused(t *testing.T, rt http.RoundTripper, u string) (bool, string) {
	t.Helper()
	var info httptrace.GotConnInfo
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return info.Reused, resp.Proto
}

// TestHTTP2HealthCheck: a connection whose peer stops answering is closed
// by the health-check PING of this transport, not left in the pool to fail
// the next request. The control case, with a long read-idle timeout, keeps
// it. The proxy holds the bytes of both directions and delivers them
// afterwards, so nothing but the health check can end the connection.
func TestHTTP2HealthCheck(t *testing.T) {
	srv, tlsConfig := h2Server(t)

	tests := []struct {
		name       string
		readIdle   time.Duration
		wantReused bool
	}{
		{"health check closes a dead connection", 100 * time.Millisecond, false},
		{"control: no check within the wait", time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := transporttest.NewProxy(strings.TrimPrefix(srv.URL, "https://"))
			require.NoError(t, err)
			defer p.Close()
			tr, err := transport.New(
				transport.WithTLSConfig(tlsConfig),
				transport.WithHTTP2ReadIdleTimeout(tt.readIdle),
				transport.WithHTTP2PingTimeout(100*time.Millisecond),
			)
			require.NoError(t, err)
			defer tr.CloseIdleConnections()
			var conns conntrack.Conns
			tr.DialContext = conns.Dial(tr.DialContext)
			u := "https://" + p.Addr()

			_, proto := reused(t, tr, u)
			require.Equal(t, "HTTP/2.0", proto)
			p.SetFault(transporttest.Hold)
			conns.CheckHealthClose(t, 0, !tt.wantReused)
			p.SetFault(transporttest.NoFault)
			got, _ := reused(t, tr, u)
			assert.Equal(t, tt.wantReused, got)
		})
	}
}

// TestIdleConnTimeout: the pool closes a connection idle for the idle
// timeout, not earlier, and the next request dials a new one; with a long
// timeout the connection is reused.
func TestIdleConnTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	t.Run("evicted after the idle timeout", func(t *testing.T) {
		tr, err := transport.New(transport.WithIdleConnTimeout(100 * time.Millisecond))
		require.NoError(t, err)
		defer tr.CloseIdleConnections()
		var conns conntrack.Conns
		tr.DialContext = conns.Dial(tr.DialContext)
		start := time.Now() // the connection goes idle after this
		reused(t, tr, srv.URL)
		select {
		case <-conns.Closed(0):
		case <-time.After(10 * time.Second):
			t.Fatal("the idle connection was not closed")
		}
		assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "not before the idle timeout")
		got, _ := reused(t, tr, srv.URL)
		assert.False(t, got)
		assert.Equal(t, 2, conns.Dialed())
	})
	t.Run("control: kept within the idle timeout", func(t *testing.T) {
		tr, err := transport.New(transport.WithIdleConnTimeout(time.Hour))
		require.NoError(t, err)
		defer tr.CloseIdleConnections()
		reused(t, tr, srv.URL)
		got, _ := reused(t, tr, srv.URL)
		assert.True(t, got)
	})
}

// h2Server starts a TLS server that offers h2 and answers 200, and returns
// it with a TLS config that trusts it. The test closes it.
func h2Server(t *testing.T) (*httptest.Server, *tls.Config) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, srv.Client().Transport.(*http.Transport).TLSClientConfig
}
