package tracing

import (
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.24.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/tracing/internal/shared"
	"github.com/kubewire/kubewire/transport"
)

// ScopeName is the instrumentation scope of the tracer that [New] gets
// from the TracerProvider.
const ScopeName = "github.com/kubewire/kubewire/tracing"

// Tracer turns what kubewire's stack learns into spans: one for each call
// and one for each attempt (see the package documentation). Make it with
// [New]; the zero value is not usable, and its StackOptions, like a nil
// Tracer's, fail every request. It is safe for concurrent use, and one
// Tracer may serve any number of stacks.
type Tracer struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	fullURL    bool
}

// New returns a Tracer whose spans go to tp. tp is required: kubewire
// never falls back to the global TracerProvider; pass
// otel.GetTracerProvider() to use it. It returns an error naming the
// option for a nil tp or an invalid option.
func New(tp trace.TracerProvider, opts ...Option) (*Tracer, error) {
	if tp == nil || shared.IsNil(tp) {
		return nil, fmt.Errorf("tracing: New: the TracerProvider must not be nil, got %T; pass otel.GetTracerProvider() for the global one", tp)
	}
	c := config{propagator: propagation.TraceContext{}}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return &Tracer{
		tracer:     tp.Tracer(ScopeName),
		propagator: c.propagator,
		fullURL:    c.fullURL,
	}, nil
}

// StackOptions returns the options that put t into a kubewire stack: its
// middleware above retry and between retry and pooltrace, and its
// observers on retry, pooltrace and timeout. Pass them to stack.New for a
// plain net/http client, or through kubeadapter.WithStackOptions to
// kubeadapter.Apply for client-go.
//
// On a nil Tracer (New returned an error that went unchecked) or a zero
// one, the options fail every request, without sending it, with a
// *transport.ConfigError.
//
// The attempt's middleware reads the connection's facts from the span in
// the request's context: give other attempt middleware that start spans
// before these options, so that tracing's sits below them.
func (t *Tracer) StackOptions() []stack.Option {
	if t == nil || t.tracer == nil {
		err := &transport.ConfigError{Err: errors.New("tracing: StackOptions of a nil or zero *Tracer: make it with tracing.New, and check its error")}
		return []stack.Option{stack.WithCallMiddleware(func(next http.RoundTripper) http.RoundTripper {
			return &failing{wrapped: wrapped{next: next}, err: err}
		})}
	}
	return []stack.Option{
		stack.WithCallMiddleware(t.call),
		stack.WithAttemptMiddleware(t.attempt),
		stack.WithRetryOptions(retry.WithObserver(t.observeDecision)),
		stack.WithPooltraceOptions(pooltrace.WithObserver(t.observeAttempt)),
		stack.WithTimeoutOptions(timeout.WithObserver(t.observeExceeded)),
	}
}

func (t *Tracer) call(next http.RoundTripper) http.RoundTripper {
	return &callRT{wrapped: wrapped{next: next}, t: t}
}

func (t *Tracer) attempt(next http.RoundTripper) http.RoundTripper {
	return &attemptRT{wrapped: wrapped{next: next}, t: t}
}

// observeAttempt adds what pooltrace learned about the connection to the
// attempt's span.
func (t *Tracer) observeAttempt(a pooltrace.Attempt) {
	if a.Request == nil {
		return
	}
	span := trace.SpanFromContext(a.Request.Context())
	if as, ok := span.(*attemptSpan); ok {
		as.hasConn, as.resends = a.HasConn, len(a.Earlier)
		as.proto, as.reused, as.wasIdle, as.idle = a.Conn.Proto, a.Conn.Reused, a.Conn.WasIdle, a.Conn.IdleTime
		return
	}
	// A span of another layer's: record what there is now.
	if !span.IsRecording() || !a.HasConn {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, semconv.NetworkProtocolVersion(protocolVersion(a.Conn.Proto)), ConnectionReusedKey.Bool(a.Conn.Reused))
	if a.Conn.Reused && a.Conn.WasIdle {
		attrs = append(attrs, ConnectionIdleKey.Float64(a.Conn.IdleTime.Seconds()))
	}
	if len(a.Earlier) > 0 {
		attrs = append(attrs, NetHTTPResendsKey.Int(len(a.Earlier)))
	}
	span.SetAttributes(attrs...)
}

// observeDecision records a retry on the call's span as an event, and why
// retrying stopped as an attribute.
func (t *Tracer) observeDecision(d retry.Decision) {
	span := trace.SpanFromContext(d.Request.Context())
	if !span.IsRecording() {
		return
	}
	if !d.Retry {
		span.SetAttributes(RetryStopKey.String(shared.Label(shared.ReasonLabels, d.Reason)))
		return
	}
	why := FailureClassKey.String(shared.Label(shared.ClassLabels, d.Class))
	if d.Err == nil {
		why = semconv.HTTPResponseStatusCode(d.StatusCode)
	}
	span.AddEvent("kubewire.retry", trace.WithAttributes(AttemptKey.Int(d.Attempt), why, RetryBackoffKey.Float64(d.Wait.Seconds())))
}

// observeExceeded records on the attempt's span that its deadline ran
// out, and where.
func (t *Tracer) observeExceeded(e timeout.Exceeded) {
	span := trace.SpanFromContext(e.Request.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(TimeoutPhaseKey.String(shared.Label(shared.PhaseLabels, e.Phase)), TimeoutLimitKey.Float64(e.Limit.Seconds()))
}

// requestAttributes returns the attributes of a span of req, given when it
// starts so that a sampler sees them: those of the HTTP client conventions
// that have few values, and url.full when asked.
func (t *Tracer) requestAttributes(req *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 5)
	switch m := req.Method; {
	case m == "":
		attrs = append(attrs, semconv.HTTPRequestMethodGet)
	case knownMethod(m):
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(m))
	default:
		attrs = append(attrs, semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(m))
	}
	if req.URL != nil {
		host, port := hostPort(req.URL)
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
		if t.fullURL {
			attrs = append(attrs, semconv.URLFull(redacted(req.URL)))
		}
	}
	return attrs
}
