package tracing_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/tracing"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder returns a tracer provider that keeps every ended span, and the
// recorder that holds them.
func recorder(t *testing.T, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(rec)}, opts...)...)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func newTracer(t *testing.T, tp trace.TracerProvider, opts ...tracing.Option) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(tp, opts...)
	require.NoError(t, err)
	return tr
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	return kvs(s.Attributes()...)
}

func kvs(list ...attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range list {
		m[kv.Key] = kv.Value
	}
	return m
}

// tree returns the call span and its attempt spans, in the order they
// started; it fails unless the spans are one call and its attempts.
func tree(t *testing.T, spans []sdktrace.ReadOnlySpan) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
	t.Helper()
	var call sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindInternal:
			require.Nil(t, call, "one call span")
			call = s
		case trace.SpanKindClient:
			attempts = append(attempts, s)
		default:
			t.Fatalf("span %q of kind %v", s.Name(), s.SpanKind())
		}
	}
	require.NotNil(t, call, "a call span")
	for _, a := range attempts {
		assert.Equal(t, call.SpanContext().SpanID(), a.Parent().SpanID(), "an attempt is a child of the call")
	}
	for i := 1; i < len(attempts); i++ {
		if attempts[i].StartTime().Before(attempts[i-1].StartTime()) {
			attempts[i], attempts[i-1] = attempts[i-1], attempts[i]
		}
	}
	return call, attempts
}

func get(t *testing.T, rt http.RoundTripper, ctx context.Context, u string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, err
}

func TestContract(t *testing.T) {
	tp, _ := recorder(t)
	transporttest.TestMiddleware(t, stack.New(30*time.Second, newTracer(t, tp).StackOptions()...))
}

// TestRetriedAttempt: the first attempt runs out of its timeout, the
// second succeeds. One call span holds two attempt spans; the first says
// where its deadline ran out and how it failed, the second carries the
// resend count and the trace context the server received; the call says
// why and after what backoff it retried.
func TestRetriedAttempt(t *testing.T) {
	var calls atomic.Int32
	var traceparent atomic.Value
	for _, s := range transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%2 == 1 {
			<-r.Context().Done()
			return
		}
		traceparent.Store(r.Header.Get("Traceparent"))
		_, _ = io.WriteString(w, "ok")
	})).All() {
		t.Run(s.Name, func(t *testing.T) {
			tp, rec := recorder(t)
			const limit = 300 * time.Millisecond
			rt := stack.New(limit, append(newTracer(t, tp).StackOptions(),
				stack.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return time.Millisecond })))...)(s.Base)
			ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
			status, err := get(t, rt, ctx, s.URL+"/api/v1/namespaces/ns/configmaps/secret-name")
			parent.End()
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, status)

			var spans []sdktrace.ReadOnlySpan
			for _, sp := range rec.Ended() {
				if sp.Name() != "parent" {
					spans = append(spans, sp)
				}
			}
			call, attempts := tree(t, spans)
			require.Len(t, attempts, 2)
			assert.Equal(t, parent.SpanContext().SpanID(), call.Parent().SpanID(), "the call is a child of the caller's span")

			ca := attrs(call)
			assert.Equal(t, "GET", call.Name())
			assert.Equal(t, "GET", ca["http.request.method"].AsString())
			assert.Equal(t, "127.0.0.1", ca["server.address"].AsString())
			assert.Equal(t, int64(2), ca[tracing.AttemptsKey].AsInt64())
			assert.Equal(t, int64(200), ca["http.response.status_code"].AsInt64())
			assert.Equal(t, codes.Unset, call.Status().Code)
			require.Len(t, call.Events(), 1)
			ev := call.Events()[0]
			assert.Equal(t, "kubewire.retry", ev.Name)
			evAttrs := map[attribute.Key]attribute.Value{}
			for _, kv := range ev.Attributes {
				evAttrs[kv.Key] = kv.Value
			}
			assert.Equal(t, int64(1), evAttrs[tracing.AttemptKey].AsInt64())
			assert.Equal(t, "maybe_sent", evAttrs[tracing.FailureClassKey].AsString())
			assert.Equal(t, 0.001, evAttrs[tracing.RetryBackoffKey].AsFloat64())

			first, second := attrs(attempts[0]), attrs(attempts[1])
			assert.Equal(t, int64(1), first[tracing.AttemptKey].AsInt64())
			assert.NotContains(t, first, attribute.Key("http.request.resend_count"))
			assert.Equal(t, "headers", first[tracing.TimeoutPhaseKey].AsString())
			assert.Equal(t, limit.Seconds(), first[tracing.TimeoutLimitKey].AsFloat64())
			assert.Equal(t, "timeout", first["error.type"].AsString())
			assert.Equal(t, "maybe_sent", first[tracing.FailureClassKey].AsString())
			assert.Equal(t, codes.Error, attempts[0].Status().Code)
			assert.Contains(t, attempts[0].Status().Description, "new connection", "the error names the connection")

			assert.Equal(t, int64(2), second[tracing.AttemptKey].AsInt64())
			assert.Equal(t, int64(1), second["http.request.resend_count"].AsInt64())
			assert.Equal(t, int64(200), second["http.response.status_code"].AsInt64())
			wantVersion := "1.1"
			if s.ProtoMajor == 2 {
				wantVersion = "2"
			}
			assert.Equal(t, wantVersion, second["network.protocol.version"].AsString())
			assert.Contains(t, second, tracing.ConnectionReusedKey)
			assert.Equal(t, codes.Unset, attempts[1].Status().Code)
			assert.Equal(t, "00-"+second2hex(attempts[1])+"-01", traceparent.Load(), "the server got the second attempt's trace context")

			for _, sp := range append(attempts, call) {
				for _, kv := range sp.Attributes() {
					assert.NotContains(t, kv.Value.Emit(), "secret-name", "%s: no URL path by default", kv.Key)
				}
			}
		})
	}
}

// second2hex returns the trace and span IDs of s as traceparent has them.
func second2hex(s sdktrace.ReadOnlySpan) string {
	return s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String()
}

// TestConnectionStory: behind a fault proxy, a GET on a reused connection
// says how long the connection sat idle; one whose reused connection is
// reset before the answer is re-sent by net/http itself, within one
// attempt, and the attempt says so.
func TestConnectionStory(t *testing.T) {
	u, p := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	base, err := transport.New()
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	tp, rec := recorder(t)
	rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(base)

	_, err = get(t, rt, context.Background(), u+"/warm")
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = get(t, rt, context.Background(), u+"/idle")
	require.NoError(t, err)
	p.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	_, err = get(t, rt, context.Background(), u+"/reset")
	require.NoError(t, err)

	var attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			attempts = append(attempts, s)
		}
	}
	require.Len(t, attempts, 3, "one attempt per call: net/http's re-send is inside the third")
	warm, idle, reset := attrs(attempts[0]), attrs(attempts[1]), attrs(attempts[2])
	assert.False(t, warm[tracing.ConnectionReusedKey].AsBool())
	assert.NotContains(t, warm, tracing.ConnectionIdleKey)
	assert.True(t, idle[tracing.ConnectionReusedKey].AsBool())
	assert.GreaterOrEqual(t, idle[tracing.ConnectionIdleKey].AsFloat64(), 0.1)
	assert.NotContains(t, idle, tracing.NetHTTPResendsKey)
	assert.Equal(t, int64(1), reset[tracing.NetHTTPResendsKey].AsInt64(), "net/http re-sent the GET by itself")
	assert.False(t, reset[tracing.ConnectionReusedKey].AsBool(), "on a new connection")
	assert.Equal(t, codes.Unset, attempts[2].Status().Code)
}

// TestStatusIsAnError: a 404 is an error on both spans, as the HTTP client
// conventions say, with error.type the status.
func TestStatusIsAnError(t *testing.T) {
	for _, s := range transporttest.NewServers(t, http.NotFoundHandler()).All() {
		t.Run(s.Name, func(t *testing.T) {
			tp, rec := recorder(t)
			rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(s.Base)
			status, err := get(t, rt, context.Background(), s.URL+"/missing")
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, status)
			call, attempts := tree(t, rec.Ended())
			require.Len(t, attempts, 1)
			for _, sp := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
				assert.Equal(t, codes.Error, sp.Status().Code, sp.SpanKind())
				assert.Equal(t, "404", attrs(sp)["error.type"].AsString())
				assert.Equal(t, int64(404), attrs(sp)["http.response.status_code"].AsInt64())
			}
		})
	}
}

// TestWatchIsNoDeadlineError: a watch streams past the timeout and is then
// stopped by the caller, which closes the stream while its reader waits
// for more, as client-go's watch does. Its spans end then, without a
// deadline error and without an error status.
func TestWatchIsNoDeadlineError(t *testing.T) {
	for _, s := range transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := io.WriteString(w, `{"type":"BOOKMARK"}`+"\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})).All() {
		t.Run(s.Name, func(t *testing.T) {
			tp, rec := recorder(t)
			const limit = 200 * time.Millisecond
			rt := stack.New(limit, newTracer(t, tp).StackOptions()...)(s.Base)
			req, err := http.NewRequest(http.MethodGet, s.URL+"/api/v1/pods?watch=true", nil)
			require.NoError(t, err)
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			read := make(chan time.Duration)
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						read <- time.Since(start)
						return
					}
				}
			}()
			time.Sleep(3 * limit)
			assert.Empty(t, rec.Ended(), "the spans last as long as the stream")
			require.NoError(t, resp.Body.Close())
			assert.GreaterOrEqual(t, <-read, 3*limit, "the watch outlived the timeout")

			call, attempts := tree(t, rec.Ended())
			require.Len(t, attempts, 1)
			for _, sp := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
				assert.Equal(t, codes.Unset, sp.Status().Code, "%v: %s", sp.SpanKind(), sp.Status().Description)
				assert.NotContains(t, attrs(sp), tracing.TimeoutPhaseKey)
				assert.NotContains(t, attrs(sp), attribute.Key("error.type"))
				assert.GreaterOrEqual(t, sp.EndTime().Sub(sp.StartTime()), 3*limit)
			}
		})
	}
}

// TestOutcomes: how the spans end on the paths a response can take.
func TestOutcomes(t *testing.T) {
	// ended returns the call span and its attempts, each ended once.
	ended := func(t *testing.T, rec *tracetest.SpanRecorder) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
		t.Helper()
		require.Len(t, rec.Started(), len(rec.Ended()), "every span started has ended")
		return tree(t, rec.Ended())
	}
	base := func(t *testing.T) http.RoundTripper {
		b, err := transport.New()
		require.NoError(t, err)
		t.Cleanup(b.CloseIdleConnections)
		return b
	}

	t.Run("body cut after the headers", func(t *testing.T) {
		u, _ := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if assert.NoError(t, err) {
				_ = conn.Close()
			}
		}))
		tp, rec := recorder(t)
		rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(base(t))
		_, err := get(t, rt, context.Background(), u)
		require.Error(t, err)
		call, attempts := ended(t, rec)
		require.Len(t, attempts, 1)
		for _, sp := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
			a := attrs(sp)
			assert.Equal(t, codes.Error, sp.Status().Code, sp.SpanKind())
			assert.Equal(t, int64(200), a["http.response.status_code"].AsInt64(), "the status was received")
			assert.Equal(t, "eof", a["error.type"].AsString())
		}
	})

	t.Run("upgrade", func(t *testing.T) {
		tp, rec := recorder(t)
		rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(base(t))
		rwc := transporttest.Upgrade(t, rt, transporttest.NewUpgradeServer(t))
		call, attempts := ended(t, rec)
		require.Len(t, attempts, 1, "the spans end at the 101")
		assert.Equal(t, int64(101), attrs(call)["http.response.status_code"].AsInt64())
		_, err := rwc.Write([]byte("hello\n"))
		require.NoError(t, err)
		line := make([]byte, len("echo: hello\n"))
		_, err = io.ReadFull(rwc, line)
		require.NoError(t, err)
		assert.Equal(t, "echo: hello\n", string(line), "the connection is the caller's")
		require.NoError(t, rwc.Close())
		assert.Len(t, rec.Ended(), 2)
	})

	t.Run("status retried", func(t *testing.T) {
		var calls atomic.Int32
		srv := transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok")
		})).HTTP1
		tp, rec := recorder(t)
		rt := stack.New(5*time.Second, append(newTracer(t, tp).StackOptions(),
			stack.WithRetryOptions(retry.WithStatusRetry(), retry.WithBackoff(func(int) time.Duration { return 0 })))...)(srv.Base)
		status, err := get(t, rt, context.Background(), srv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		call, attempts := ended(t, rec)
		require.Len(t, attempts, 2)
		assert.Equal(t, "503", attrs(attempts[0])["error.type"].AsString(), "retry drained and closed the 503's body")
		assert.Equal(t, codes.Error, attempts[0].Status().Code)
		assert.Equal(t, int64(503), kvs(call.Events()[0].Attributes...)["http.response.status_code"].AsInt64(), "the retry event names the status retried")
		assert.Equal(t, codes.Unset, call.Status().Code)
	})

	t.Run("short request body", func(t *testing.T) {
		srv := transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })).HTTP1
		tp, rec := recorder(t)
		rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(srv.Base)
		req, err := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("short")))
		require.NoError(t, err)
		req.ContentLength = 100
		_, err = rt.RoundTrip(req)
		require.Error(t, err)
		call, attempts := ended(t, rec)
		require.Len(t, attempts, 1)
		for _, sp := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
			assert.Equal(t, "request_body", attrs(sp)["error.type"].AsString(), "%v: %s", sp.SpanKind(), sp.Status().Description)
		}
	})

	t.Run("the call ends with its last attempt's error", func(t *testing.T) {
		u, p := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		p.SetFault(transporttest.Stall)
		tp, rec := recorder(t)
		rt := stack.New(200*time.Millisecond, append(newTracer(t, tp).StackOptions(),
			stack.WithRetryOptions(retry.WithBackoff(func(int) time.Duration {
				// Between the attempts: the first timed out; the next
				// connections are reset.
				p.SetFault(transporttest.ResetBeforeForward)
				return 0
			})))...)(base(t))
		_, err := get(t, rt, context.Background(), u)
		require.Error(t, err)
		call, attempts := ended(t, rec)
		require.Len(t, attempts, retry.DefaultMaxAttempts)
		assert.Equal(t, "timeout", attrs(attempts[0])["error.type"].AsString())
		last := attempts[len(attempts)-1]
		assert.Equal(t, "connection_reset", attrs(last)["error.type"].AsString(), last.Status().Description)
		assert.Equal(t, "connection_reset", attrs(call)["error.type"].AsString(), "not the first attempt's timeout")
		assert.Equal(t, "attempts", attrs(call)[tracing.RetryStopKey].AsString())
	})
}

// TestCallerCancels: a caller that cancels while reading the body ends
// both spans with error.type "canceled" and no error status.
func TestCallerCancels(t *testing.T) {
	release := make(chan struct{})
	u, _ := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	base, err := transport.New()
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	tp, rec := recorder(t)
	rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(base)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	buf := make([]byte, 7)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	cancel()
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, context.Canceled)
	call, attempts := tree(t, rec.Ended())
	require.Len(t, attempts, 1)
	for _, sp := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
		assert.Equal(t, codes.Unset, sp.Status().Code, sp.SpanKind())
		assert.Equal(t, "canceled", attrs(sp)["error.type"].AsString())
	}
	require.NoError(t, resp.Body.Close())
	assert.Len(t, rec.Ended(), 2, "Close after the end ends nothing twice")
}

// TestOptions: the trace context can be turned off or sent another way;
// the full URL is recorded only when asked, without credentials.
func TestOptions(t *testing.T) {
	var got atomic.Value
	srv := transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Clone())
	})).HTTP1
	tests := []struct {
		name        string
		give        []tracing.Option
		wantHeaders map[string]bool
		wantURL     bool
	}{
		{"default", nil, map[string]bool{"Traceparent": true, "Baggage": false}, false},
		{"without", []tracing.Option{tracing.WithoutPropagation()}, map[string]bool{"Traceparent": false}, false},
		{"composite", []tracing.Option{tracing.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))}, map[string]bool{"Traceparent": true}, false},
		{"full URL", []tracing.Option{tracing.WithFullURL()}, map[string]bool{"Traceparent": true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, rec := recorder(t)
			rt := stack.New(5*time.Second, newTracer(t, tp, tt.give...).StackOptions()...)(srv.Base)
			u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/api/v1/namespaces/ns/pods/p?limit=1"
			req, err := http.NewRequest(http.MethodGet, u, nil)
			require.NoError(t, err)
			req.Header.Set("X-Caller", "kept")
			before := req.Header.Clone()
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, before, req.Header, "the caller's headers are not modified")
			h := got.Load().(http.Header)
			assert.Equal(t, "kept", h.Get("X-Caller"))
			for k, want := range tt.wantHeaders {
				assert.Equal(t, want, h.Get(k) != "", "header %s", k)
			}
			for _, sp := range rec.Ended() {
				full, ok := attrs(sp)["url.full"]
				assert.Equal(t, tt.wantURL, ok, "url.full on %v", sp.SpanKind())
				if ok {
					assert.Equal(t, strings.Replace(srv.URL, "http://", "http://REDACTED:REDACTED@", 1)+"/api/v1/namespaces/ns/pods/p?limit=1", full.AsString())
				}
				for _, kv := range sp.Attributes() {
					assert.NotContains(t, kv.Value.Emit(), "hunter2")
				}
			}
		})
	}
}

// TestNotSampled: a span the sampler drops records nothing, and the
// request still carries the trace context, unsampled.
func TestNotSampled(t *testing.T) {
	var got atomic.Value
	srv := transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Traceparent"))
	})).HTTP1
	tp, rec := recorder(t, sdktrace.WithSampler(sdktrace.NeverSample()))
	rt := stack.New(5*time.Second, newTracer(t, tp).StackOptions()...)(srv.Base)
	status, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, rec.Ended())
	assert.True(t, strings.HasSuffix(got.Load().(string), "-00"), "unsampled trace context: %q", got.Load())
}

func TestNewBadInput(t *testing.T) {
	tp, _ := recorder(t)
	tests := []struct {
		name string
		tp   trace.TracerProvider
		opts []tracing.Option
		want string
	}{
		{"nil provider", nil, nil, "tracing: New: the TracerProvider must not be nil, got <nil>; pass otel.GetTracerProvider() for the global one"},
		{"typed nil provider", (*sdktrace.TracerProvider)(nil), nil, "tracing: New: the TracerProvider must not be nil, got *trace.TracerProvider; pass otel.GetTracerProvider() for the global one"},
		{"nil propagator", tp, []tracing.Option{tracing.WithPropagator(nil)}, "tracing: WithPropagator must not be nil (WithoutPropagation sends no trace context), got <nil>"},
		{"typed nil propagator", tp, []tracing.Option{tracing.WithPropagator((*propagation.TraceContext)(nil))}, "tracing: WithPropagator must not be nil (WithoutPropagation sends no trace context), got *propagation.TraceContext"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := tracing.New(tt.tp, tt.opts...)
			assert.Nil(t, tr)
			assert.EqualError(t, err, tt.want)
		})
	}
	tr, err := tracing.New(tp, nil)
	require.NoError(t, err, "a nil option is skipped")
	assert.NotNil(t, tr)

	// A nil Tracer, from an unchecked error, fails requests; it does not
	// panic.
	var none *tracing.Tracer
	want := "tracing: StackOptions of a nil or zero *Tracer: make it with tracing.New, and check its error"
	transporttest.TestConfigError(t, context.Background(), stack.New(time.Second, none.StackOptions()...), want)
	transporttest.TestConfigError(t, context.Background(), stack.New(time.Second, new(tracing.Tracer).StackOptions()...), want)
}
