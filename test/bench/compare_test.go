package bench_test

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"testing"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/httptrace/otelhttptrace"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kubewire/kubewire/metrics"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/tracing"
	"github.com/kubewire/kubewire/transport"
)

// The side-by-side benchmarks share BenchmarkBare as their baseline: the
// bare pooled transport with the caller's deadline. Each candidate wraps
// the same transport; every request carries the same caller deadline.
// `make bench` runs them interleaved and prints benchstat's ratios.

// benchCandidate runs wrap(base) on both servers. When ownDeadline is
// false the caller's context carries the deadline, as it must for
// candidates that have none of their own.
func benchCandidate(b *testing.B, ownDeadline bool, wrap func(http.RoundTripper) http.RoundTripper) {
	for _, s := range servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			loop(b, wrap(s.Base), ownDeadline, s.URL)
		})
	}
}

// loop sends GET u through rt b.N times. When ownDeadline is false each
// request carries the caller's deadline.
func loop(b *testing.B, rt http.RoundTripper, ownDeadline bool, u string) {
	b.ReportAllocs()
	for b.Loop() {
		if ownDeadline {
			roundTrip(b, rt, context.Background(), u)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		roundTrip(b, rt, ctx, u)
		cancel()
	}
}

// BenchmarkKubewire is the full kubewire stack: retry, pooltrace, and
// timeout, which gives the deadline.
func BenchmarkKubewire(b *testing.B) {
	benchCandidate(b, true, transport.Chain(retry.New(), pooltrace.New(), timeout.New(deadline)))
}

// BenchmarkKubewireMetrics is the same stack observed by the metrics
// package: its cost over BenchmarkKubewire is what the metrics cost.
func BenchmarkKubewireMetrics(b *testing.B) {
	m := metrics.New()
	prometheus.NewRegistry().MustRegister(m)
	benchCandidate(b, true, m.Stack(deadline))
}

// BenchmarkRetryableHTTP is hashicorp/go-retryablehttp's RoundTripper with
// its defaults (4 retries, exponential backoff), logging off.
func BenchmarkRetryableHTTP(b *testing.B) {
	benchCandidate(b, false, func(base http.RoundTripper) http.RoundTripper {
		c := retryablehttp.NewClient()
		c.HTTPClient = &http.Client{Transport: base}
		c.Logger = nil
		return &retryablehttp.RoundTripper{Client: c}
	})
}

// sampled returns the SDK's tracer provider as users run it, sampling
// every span and exporting them in batches, here to an exporter that drops
// them: the tracing candidates share it, so that they differ only in what
// they record.
func sampled(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// otelHTTP wraps rt in otelhttp's transport with its httptrace client trace
// (otelhttptrace), as users trace client-go today. It sends the W3C trace
// context, as package tracing does by default: otelhttp's default is the
// global propagator, which sends nothing until a program sets one.
func otelHTTP(tp *sdktrace.TracerProvider, rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithClientTrace(func(ctx context.Context) *httptrace.ClientTrace {
			return otelhttptrace.NewClientTrace(ctx, otelhttptrace.WithTracerProvider(tp))
		}),
	)
}

// BenchmarkOtelHTTP is otelhttp's transport with its httptrace client trace
// (otelhttptrace), recording spans with the SDK's tracer provider.
func BenchmarkOtelHTTP(b *testing.B) {
	tp := sampled(b)
	benchCandidate(b, false, func(base http.RoundTripper) http.RoundTripper { return otelHTTP(tp, base) })
}

// BenchmarkKubewireOtelHTTP is otelhttp, as above, over the full kubewire
// stack: its cost over BenchmarkKubewire is what otelhttp costs a kubewire
// user.
func BenchmarkKubewireOtelHTTP(b *testing.B) {
	tp := sampled(b)
	benchCandidate(b, true, func(base http.RoundTripper) http.RoundTripper {
		return otelHTTP(tp, stack.New(deadline)(base))
	})
}

// BenchmarkKubewireTracing is the full kubewire stack traced by package
// tracing, with the same tracer provider: a call span and an attempt span
// per request, and the trace context on the request. Its cost over
// BenchmarkKubewire is what tracing costs.
func BenchmarkKubewireTracing(b *testing.B) {
	t, err := tracing.New(sampled(b))
	if err != nil {
		b.Fatal(err)
	}
	benchCandidate(b, true, stack.New(deadline, t.StackOptions()...))
}
