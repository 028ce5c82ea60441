package tracing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/httptrace/otelhttptrace"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/tracing"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// The per-attempt timeout of the tests, and the wait between attempts.
const (
	attemptTimeout = 3 * time.Second
	backoff        = 10 * time.Millisecond
	idle           = 200 * time.Millisecond
)

func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// seeded returns a namespace holding the ConfigMap "seed".
func seeded(t *testing.T) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config(t))
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kw-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(ns.Name).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}

// stalledGET warms a connection of cfg's client, lets it sit idle, makes
// the proxy stop answering on it, and GETs the seed again: the GET fails on
// the reused connection and must go out again on a new one.
func stalledGET(t *testing.T, cfg *rest.Config, p *transporttest.Proxy, ns string, afterWarm func()) error {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = c.CoreV1().ConfigMaps(ns).Get(context.Background(), "seed", metav1.GetOptions{})
	require.NoError(t, err)
	afterWarm()
	time.Sleep(idle)
	// Existing connections stop answering; new ones pass. Holding the
	// answer, not dropping bytes, keeps the TLS stream intact.
	p.SetFaultExisting(transporttest.Stall)
	_, err = c.CoreV1().ConfigMaps(ns).Get(context.Background(), "seed", metav1.GetOptions{})
	return err
}

// http1 keeps cfg's client on HTTP/1.1: a stalled HTTP/2 connection would
// carry the second attempt too, until its health check closes it.
func http1(cfg *rest.Config) *rest.Config {
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	return cfg
}

// TestRetriedGETOnReusedConnection is the span tree on a real API
// server: a GET that fails on a reused connection and succeeds on the
// second attempt gives one call span with two attempt spans that say why.
func TestRetriedGETOnReusedConnection(t *testing.T) {
	ns := seeded(t)
	cfg, p := kubetest.Proxied(t, env.Config(t))
	http1(cfg)
	tp, rec := recorder(t)
	tr, err := tracing.New(tp)
	require.NoError(t, err)
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithTimeout(attemptTimeout),
		kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return backoff })),
		kubeadapter.WithStackOptions(tr.StackOptions()...)))

	require.NoError(t, stalledGET(t, cfg, p, ns, rec.Reset))

	spans := rec.Ended()
	t.Logf("kubewire's spans:\n%s", render(spans))
	require.Len(t, spans, 3)
	call, attempts := tree(t, spans)
	require.Len(t, attempts, 2)

	ca := attrs(call.Attributes())
	assert.Equal(t, "GET", call.Name())
	assert.Equal(t, int64(2), ca[tracing.AttemptsKey].AsInt64())
	assert.Equal(t, int64(200), ca["http.response.status_code"].AsInt64())
	assert.Equal(t, codes.Unset, call.Status().Code)
	require.Len(t, call.Events(), 1)
	ev := attrs(call.Events()[0].Attributes)
	assert.Equal(t, "kubewire.retry", call.Events()[0].Name)
	assert.Equal(t, "maybe_sent", ev[tracing.FailureClassKey].AsString(), "the GET may have reached the server")
	assert.Equal(t, backoff.Seconds(), ev[tracing.RetryBackoffKey].AsFloat64())

	first, second := attrs(attempts[0].Attributes()), attrs(attempts[1].Attributes())
	assert.True(t, first[tracing.ConnectionReusedKey].AsBool(), "the first attempt took the pooled connection")
	assert.GreaterOrEqual(t, first[tracing.ConnectionIdleKey].AsFloat64(), idle.Seconds())
	assert.Equal(t, "1.1", first["network.protocol.version"].AsString())
	assert.Equal(t, "headers", first[tracing.TimeoutPhaseKey].AsString())
	assert.Equal(t, attemptTimeout.Seconds(), first[tracing.TimeoutLimitKey].AsFloat64())
	assert.Equal(t, "timeout", first["error.type"].AsString())
	assert.Equal(t, codes.Error, attempts[0].Status().Code)
	assert.Contains(t, attempts[0].Status().Description, "connection reused after")

	assert.False(t, second[tracing.ConnectionReusedKey].AsBool(), "the second attempt got a new connection")
	assert.Equal(t, int64(1), second["http.request.resend_count"].AsInt64())
	assert.Equal(t, int64(200), second["http.response.status_code"].AsInt64())
	assert.Equal(t, codes.Unset, attempts[1].Status().Code)

	for _, s := range spans {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.Emit(), "seed", "%s: no object name by default", kv.Key)
			assert.NotContains(t, kv.Value.Emit(), ns, "%s: no namespace by default", kv.Key)
		}
	}
}

// TestOtelHTTPSameFailure runs the same failure under otelhttp, with its
// client trace, over kubewire's stack without tracing, and logs what it
// shows: one span for the call, successful, whose children mix both
// attempts' connection events. The README shows it beside kubewire's.
func TestOtelHTTPSameFailure(t *testing.T) {
	ns := seeded(t)
	cfg, p := kubetest.Proxied(t, env.Config(t))
	http1(cfg)
	tp, rec := recorder(t)
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithTimeout(attemptTimeout),
		kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) time.Duration { return backoff }))))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp),
			otelhttp.WithClientTrace(func(ctx context.Context) *httptrace.ClientTrace {
				return otelhttptrace.NewClientTrace(ctx, otelhttptrace.WithTracerProvider(tp))
			}))
	})

	require.NoError(t, stalledGET(t, cfg, p, ns, rec.Reset))

	spans := rec.Ended()
	t.Logf("otelhttp's spans:\n%s", render(spans))
	var roots, getconns int
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	for _, s := range spans {
		assert.NotEqual(t, codes.Error, s.Status().Code, "%s: otelhttp sees no error", s.Name())
		if !ids[s.Parent().SpanID()] {
			roots++
		}
		if s.Name() == "http.getconn" {
			getconns++
		}
	}
	assert.Equal(t, 1, roots, "otelhttp has one span for the call, whatever the attempts")
	assert.Equal(t, 2, getconns, "under it, both attempts' connections, side by side")
}

// TestWatchSpan: a watch through the traced stack outlives the timeout;
// its one call span, and the call's one attempt, end when the caller stops
// the watch, without a deadline error.
func TestWatchSpan(t *testing.T) {
	ns := seeded(t)
	cfg := env.Config(t)
	tp, rec := recorder(t)
	tr, err := tracing.New(tp, tracing.WithFullURL())
	require.NoError(t, err)
	const limit = 500 * time.Millisecond
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithTimeout(limit), kubeadapter.WithStackOptions(tr.StackOptions()...)))
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	w, err := c.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	start := time.Now()
	time.Sleep(3 * limit)
	_, err = c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for ev := range w.ResultChan() {
		require.NotEqual(t, "ERROR", string(ev.Type), "%v", ev.Object)
		if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Name == "late" {
			break
		}
	}
	assert.Greater(t, time.Since(start), 2*limit, "the watch outlived its timeout")
	w.Stop()

	isWatch := func(s sdktrace.ReadOnlySpan) bool {
		return strings.Contains(attrs(s.Attributes())["url.full"].AsString(), "watch=true")
	}
	var watch []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		watch = slices.DeleteFunc(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return !isWatch(s) })
		return len(watch) == 2
	}, 10*time.Second, 10*time.Millisecond, "the watch's spans end when it stops")
	t.Logf("the watch's spans:\n%s", render(watch))
	call, attempts := tree(t, watch)
	require.Len(t, attempts, 1)
	for _, s := range []sdktrace.ReadOnlySpan{call, attempts[0]} {
		a := attrs(s.Attributes())
		assert.NotEqual(t, codes.Error, s.Status().Code, "%v: %s", s.SpanKind(), s.Status().Description)
		assert.NotContains(t, a, tracing.TimeoutPhaseKey)
		assert.NotEqual(t, "timeout", a["error.type"].AsString())
		assert.Greater(t, s.EndTime().Sub(s.StartTime()), 2*limit)
	}
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// tree returns the call span and its attempts, in the order they started.
func tree(t *testing.T, spans []sdktrace.ReadOnlySpan) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
	t.Helper()
	var call sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindInternal {
			require.Nil(t, call, "one call span")
			call = s
		} else {
			attempts = append(attempts, s)
		}
	}
	require.NotNil(t, call)
	for _, a := range attempts {
		require.Equal(t, trace.SpanKindClient, a.SpanKind())
		require.Equal(t, call.SpanContext().SpanID(), a.Parent().SpanID(), "an attempt is the call's child")
	}
	slices.SortFunc(attempts, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return call, attempts
}

// render prints spans as a tree, children under their parent in the order
// they started: name, kind, duration, status, attributes and events.
func render(spans []sdktrace.ReadOnlySpan) string {
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var b strings.Builder
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		for _, s := range spans {
			p := s.Parent().SpanID()
			if (depth == 0 && ids[p]) || (depth > 0 && p != parent) {
				continue
			}
			pad := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s (%s) %v", pad, s.Name(), s.SpanKind(), s.EndTime().Sub(s.StartTime()).Round(time.Millisecond))
			if s.Status().Code != codes.Unset {
				fmt.Fprintf(&b, " %s", s.Status().Code)
				if d := s.Status().Description; d != "" {
					fmt.Fprintf(&b, " %q", d)
				}
			}
			b.WriteString("\n")
			for _, kv := range s.Attributes() {
				fmt.Fprintf(&b, "%s    %s=%s\n", pad, kv.Key, kv.Value.Emit())
			}
			for _, ev := range s.Events() {
				fmt.Fprintf(&b, "%s    event %s", pad, ev.Name)
				for _, kv := range ev.Attributes {
					fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.Emit())
				}
				b.WriteString("\n")
			}
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	walk(trace.SpanID{}, 0)
	return b.String()
}
