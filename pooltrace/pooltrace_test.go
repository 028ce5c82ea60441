package pooltrace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestContract(t *testing.T) {
	transporttest.TestMiddleware(t, pooltrace.New(pooltrace.WithLogger(funcr.New(func(string, string) {}, funcr.Options{Verbosity: 10}))))
}

// logs is a logr sink that keeps every line.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logger(v int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: v})
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logs) count(msg string) int {
	return strings.Count(l.all(), `"msg"="`+msg+`"`)
}

func targets(t *testing.T, h http.HandlerFunc) []transporttest.Server {
	t.Helper()
	return transporttest.NewServers(t, h).All()
}

func do(t *testing.T, rt http.RoundTripper, method, u string, hdr http.Header) (int, error) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

func TestAttemptFacts(t *testing.T) {
	for _, tg := range targets(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }) {
		t.Run(tg.Name, func(t *testing.T) {
			var mu sync.Mutex
			var got []pooltrace.Attempt
			rt := pooltrace.New(pooltrace.WithObserver(func(a pooltrace.Attempt) {
				mu.Lock()
				got = append(got, a)
				mu.Unlock()
			}))(tg.Base)

			_, err := do(t, rt, http.MethodGet, tg.URL+"/api/v1/namespaces?limit=5", nil)
			require.NoError(t, err)
			time.Sleep(200 * time.Millisecond) // let the connection sit idle
			_, err = do(t, rt, http.MethodGet, tg.URL+"/api/v1/namespaces?limit=5", nil)
			require.NoError(t, err)

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 2, "one observation per attempt")
			first, second := got[0], got[1]
			wantProto := "HTTP/1.1"
			if tg.ProtoMajor == 2 {
				wantProto = "HTTP/2.0"
			}
			for _, a := range got {
				assert.Equal(t, http.MethodGet, a.Method)
				assert.Equal(t, "/api/v1/namespaces", a.Path, "the query string is not recorded")
				assert.Equal(t, http.StatusOK, a.StatusCode)
				assert.True(t, a.HasConn)
				assert.Equal(t, wantProto, a.Conn.Proto)
				assert.Contains(t, a.Conn.LocalAddr.String(), "127.0.0.1:")
				assert.Equal(t, strings.TrimPrefix(strings.TrimPrefix(tg.URL, "http://"), "https://"), a.Conn.RemoteAddr.String())
				if tg.ProtoMajor == 1 {
					// x/net/http2 reports the write from its writer goroutine,
					// which can run after the response headers arrived.
					assert.Greater(t, a.WroteRequest, time.Duration(0))
					assert.GreaterOrEqual(t, a.FirstByte, a.WroteRequest)
				}
				assert.Greater(t, a.FirstByte, time.Duration(0))
				assert.GreaterOrEqual(t, a.Duration, a.FirstByte)
				assert.Empty(t, a.Earlier)
			}
			assert.False(t, first.Conn.Reused)
			assert.Greater(t, first.Dial, time.Duration(0), "a new connection is dialled")
			if tg.ProtoMajor == 2 {
				assert.Greater(t, first.TLSHandshake, time.Duration(0), "%+v", first)
			}
			assert.True(t, second.Conn.Reused)
			assert.True(t, second.Conn.WasIdle)
			assert.GreaterOrEqual(t, second.Conn.IdleTime, 200*time.Millisecond)
			assert.Zero(t, second.Dial)
			assert.Zero(t, second.TLSHandshake)
		})
	}
}

// TestObserverSeesRequest: an observer gets the request pooltrace received,
// with the context the layers above gave it; an error's Attempt does not
// keep the request.
func TestObserverSeesRequest(t *testing.T) {
	u, base, p := proxied(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	type key struct{}
	var seen []*http.Request
	rt := pooltrace.New(pooltrace.WithObserver(func(a pooltrace.Attempt) { seen = append(seen, a.Request) }))(base)
	send := func(method string) error {
		req, err := http.NewRequestWithContext(context.WithValue(context.Background(), key{}, method), method, u+"/a", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return err
	}

	require.NoError(t, send(http.MethodGet))
	p.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	err := send(http.MethodPatch)
	require.Error(t, err)

	require.Len(t, seen, 2)
	for i, method := range []string{http.MethodGet, http.MethodPatch} {
		require.NotNil(t, seen[i], method)
		assert.Equal(t, method, seen[i].Context().Value(key{}), "the context of the layers above")
	}
	var pe *pooltrace.Error
	require.True(t, errors.As(err, &pe), "%T: %v", err, err)
	assert.Nil(t, pe.Attempt.Request, "an error does not keep the request")
}

// proxied returns a base transport that reaches the server through a fault
// proxy, and the URL to use.
func proxied(t *testing.T, h http.HandlerFunc) (string, *http.Transport, *transporttest.Proxy) {
	t.Helper()
	u, p := transporttest.BehindProxy(t, h)
	base, err := transport.New()
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	return u, base, p
}

func TestErrorOnReusedConnection(t *testing.T) {
	u, base, p := proxied(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	var l logs
	rt := pooltrace.New(pooltrace.WithLogger(l.logger(0)))(base)

	_, err := do(t, rt, http.MethodGet, u+"/warm", nil)
	require.NoError(t, err)
	assert.Empty(t, l.all(), "a successful attempt is logged only at the debug verbosity")
	time.Sleep(100 * time.Millisecond)

	// A PATCH that dies on the reused connection: net/http does not re-send it.
	p.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	_, err = do(t, rt, http.MethodPatch, u+"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a", nil)
	require.Error(t, err)
	var pe *pooltrace.Error
	require.True(t, errors.As(err, &pe), "%T: %v", err, err)
	assert.True(t, pe.Attempt.Conn.Reused)
	assert.GreaterOrEqual(t, pe.Attempt.Conn.IdleTime, 100*time.Millisecond)
	assert.Nil(t, pe.Attempt.Err)
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "the root cause is kept: %v", err)
	// The retry middleware above reads the connection without importing
	// pooltrace.
	var ce roundtrip.ConnError
	require.True(t, errors.As(err, &ce), "%T: %v", err, err)
	key, ok := ce.FailedConn()
	assert.True(t, ok)
	assert.NotZero(t, key)
	// The message carries the idle time measured, whatever the machine's
	// load made of the 100ms sleep.
	idle := regexp.QuoteMeta(pe.Attempt.Conn.IdleTime.Round(time.Millisecond).String())
	assert.Regexp(t, `^Patch "[^"]+": on connection reused after `+idle+` idle \(HTTP/1.1 127.0.0.1:\d+->127.0.0.1:\d+\): read tcp .*: connection reset by peer$`, err.Error())
	assert.Equal(t, 1, l.count("request failed on a reused connection"))
	assert.Contains(t, l.all(), `"idleTime"=`)
	// Nothing reads the timings of the phases: neither an observer nor a
	// logger of every attempt. They are not recorded, nor logged as zeros.
	assert.Zero(t, pe.Attempt.WroteRequest)
	assert.Zero(t, pe.Attempt.FirstByte)
	assert.NotContains(t, l.all(), `"wroteRequest"`)
}

// TestTimingsForADebugLogger: a logger that logs every attempt reads the
// timings of the phases, so they are recorded and logged.
func TestTimingsForADebugLogger(t *testing.T) {
	u, base, _ := proxied(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	var l logs
	rt := pooltrace.New(pooltrace.WithLogger(l.logger(pooltrace.DefaultVerbosity)))(base)
	_, err := do(t, rt, http.MethodGet, u+"/x", nil)
	require.NoError(t, err)
	assert.Regexp(t, `"dial"=\S+ "tlsHandshake"=\S+ "wroteRequest"=\S+ "firstByte"=`, l.all())
	assert.NotContains(t, l.all(), `"firstByte"=0s`, "the first byte arrived, so it was timed")
}

func TestSilentResendIsLogged(t *testing.T) {
	var mu sync.Mutex
	executed := 0
	u, base, p := proxied(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		executed++
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	var l logs
	var attempts []pooltrace.Attempt
	rt := pooltrace.New(pooltrace.WithLogger(l.logger(0)), pooltrace.WithObserver(func(a pooltrace.Attempt) { attempts = append(attempts, a) }))(base)
	_, err := do(t, rt, http.MethodGet, u+"/warm", nil)
	require.NoError(t, err)

	// The GET reaches the server, its answer is lost: net/http re-sends it on
	// a new connection by itself.
	p.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	status, err := do(t, rt, http.MethodGet, u+"/api/v1/namespaces/ns/pods/p", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	mu.Lock()
	assert.Equal(t, 3, executed, "warm-up, then the GET twice")
	mu.Unlock()
	require.Len(t, attempts, 2)
	a := attempts[1]
	require.Len(t, a.Earlier, 1)
	assert.True(t, a.Earlier[0].Reused)
	assert.False(t, a.Conn.Reused)
	assert.Equal(t, 1, l.count("net/http re-sent the request on another connection after a failure on a reused one; the server may have executed it twice"))
}

func TestBodyErrorCarriesConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "short")
		_ = http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer srv.Close()
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	rt := pooltrace.New()(base)
	_, err = do(t, rt, http.MethodGet, srv.URL, nil)
	require.Error(t, err)
	var pe *pooltrace.Error
	require.True(t, errors.As(err, &pe), "%T: %v", err, err)
	assert.True(t, errors.Is(err, io.ErrUnexpectedEOF))
	assert.True(t, strings.HasPrefix(err.Error(), "on new connection (HTTP/1.1 127.0.0.1:"), err.Error())
	// The key is taken when the body fails, after RoundTrip returned.
	key, ok := pe.FailedConn()
	assert.True(t, ok)
	assert.NotZero(t, key)
}

func TestTimeoutThroughURLError(t *testing.T) {
	for _, tg := range targets(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}) {
		t.Run(tg.Name, func(t *testing.T) {
			rt := transport.Chain(pooltrace.New(), timeout.New(200*time.Millisecond))(tg.Base)
			_, err := do(t, rt, http.MethodGet, tg.URL, nil)
			var ue *url.Error
			require.True(t, errors.As(err, &ue))
			assert.True(t, ue.Timeout(), "url.Error.Timeout() must see through pooltrace.Error: %v", err)
			assert.True(t, errors.Is(err, context.DeadlineExceeded))
			var te *timeout.Error
			require.True(t, errors.As(err, &te))
			assert.Contains(t, err.Error(), ": on new connection (")
			assert.Contains(t, err.Error(), "request timeout of 200ms exceeded")
		})
	}
}

func TestNoSecretsInOutput(t *testing.T) {
	const token, cookie, query = "s3cr3t-b3ar3r", "c00kie-val", "qu3ry-t0ken"
	u, base, p := proxied(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	var l logs
	var observed []string
	rt := pooltrace.New(pooltrace.WithLogger(l.logger(10)), pooltrace.WithObserver(func(a pooltrace.Attempt) {
		observed = append(observed, fmt.Sprintf("%+v", a))
	}))(base)
	hdr := http.Header{"Authorization": {"Bearer " + token}, "Cookie": {"session=" + cookie}}
	_, err := do(t, rt, http.MethodGet, u+"/api?access_token="+query, hdr)
	require.NoError(t, err)
	p.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	_, err = do(t, rt, http.MethodPost, u+"/api?access_token="+query, hdr)
	require.Error(t, err)
	var pe *pooltrace.Error
	require.True(t, errors.As(err, &pe))

	out := l.all() + strings.Join(observed, "\n") + pe.Error()
	require.NotEmpty(t, l.all())
	for _, secret := range []string{token, cookie, query} {
		assert.NotContains(t, out, secret)
	}
}

func TestContextLoggerWins(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	var configured, fromCtx logs
	rt := pooltrace.New(pooltrace.WithLogger(configured.logger(10)), pooltrace.WithVerbosity(2))(base)
	req, err := http.NewRequestWithContext(logr.NewContext(context.Background(), fromCtx.logger(2)), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, configured.all())
	assert.Equal(t, 1, fromCtx.count("request attempt"))

	// Below the configured verbosity nothing is logged.
	var quiet logs
	req, err = http.NewRequestWithContext(logr.NewContext(context.Background(), quiet.logger(1)), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, quiet.all())
}

func TestComposesWithExistingTrace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	var theirs, ours int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { theirs++ }})
	rt := pooltrace.New(pooltrace.WithObserver(func(a pooltrace.Attempt) {
		if a.HasConn {
			ours++
		}
	}))(base)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 1, theirs, "the caller's trace still runs")
	assert.Equal(t, 1, ours)
}

func TestNoConnection(t *testing.T) {
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	rt := pooltrace.New()(base)
	_, err = do(t, rt, http.MethodGet, "http://127.0.0.1:1/", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "before a connection was established: dial tcp 127.0.0.1:1: connect: connection refused")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED))
	var ce roundtrip.ConnError
	require.True(t, errors.As(err, &ce))
	_, ok := ce.FailedConn()
	assert.False(t, ok, "a failed dial names no connection")
}

// TestRejectsBadOptions: an invalid option fails every request with an
// error naming it, without sending it, and Check reports the same.
func TestRejectsBadOptions(t *testing.T) {
	for _, tt := range []struct {
		give pooltrace.Option
		want string
	}{
		{pooltrace.WithVerbosity(-1), "pooltrace: WithVerbosity must not be negative, got -1"},
		{pooltrace.WithObserver(nil), "pooltrace: WithObserver must not be nil"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			assert.EqualError(t, pooltrace.Check(tt.give), tt.want)
			transporttest.TestConfigError(t, context.Background(), pooltrace.New(tt.give), tt.want)
		})
	}
	assert.NoError(t, pooltrace.Check(pooltrace.WithVerbosity(0)))
}
