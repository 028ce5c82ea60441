package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.24.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// ScopeName is the instrumentation scope of the tracer that [New] gets
// from the TracerProvider.
const ScopeName = "github.com/kubewire/kubewire/tracing"

// The attributes only kubewire knows (see the package documentation).
const (
	AttemptKey          = attribute.Key("kubewire.attempt")
	AttemptsKey         = attribute.Key("kubewire.attempts")
	ConnectionReusedKey = attribute.Key("kubewire.connection.reused")
	ConnectionIdleKey   = attribute.Key("kubewire.connection.idle_time")
	NetHTTPResendsKey   = attribute.Key("kubewire.net_http.resends")
	FailureClassKey     = attribute.Key("kubewire.failure.class")
	RetryBackoffKey     = attribute.Key("kubewire.retry.backoff")
	RetryStopKey        = attribute.Key("kubewire.retry.stop_reason")
	TimeoutPhaseKey     = attribute.Key("kubewire.timeout.phase")
	TimeoutLimitKey     = attribute.Key("kubewire.timeout.limit")
)

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	propagator propagation.TextMapPropagator
	fullURL    bool
	err        error
}

// WithPropagator sets how the trace context travels on each attempt's
// request. Default: W3C Trace Context (propagation.TraceContext), which
// the kube-apiserver reads; pass otel.GetTextMapPropagator() for the
// global one. Must not be nil; [WithoutPropagation] sends nothing.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p == nil || isNil(p) {
			c.fail("WithPropagator must not be nil (WithoutPropagation sends no trace context), got %T", p)
			return
		}
		c.propagator = p
	})
}

// WithoutPropagation sends no trace context: requests go out as they came.
// Default: the trace context is sent (see [WithPropagator]).
func WithoutPropagation() Option {
	return optionFunc(func(c *config) { c.propagator = nil })
}

// WithFullURL records url.full on every span: the request's URL, query
// included, with any user name and password replaced by "REDACTED". It
// carries object names, so it gives every object a value of its own, and
// the query as sent: an exec's command and arguments among them. Default:
// off; spans carry the server's address and port, not the path.
func WithFullURL() Option {
	return optionFunc(func(c *config) { c.fullURL = true })
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("tracing: "+format, args...)
	}
}

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
	if tp == nil || isNil(tp) {
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

// The span kinds, made once: an option costs an allocation.
var (
	internalKind = trace.WithSpanKind(trace.SpanKindInternal)
	clientKind   = trace.WithSpanKind(trace.SpanKindClient)
)

// callSpan is the span of one call, in the context of every attempt.
type callSpan struct {
	trace.Span
	request  []attribute.KeyValue // the request's attributes, for the attempts too
	attempts atomic.Int32
	ended    atomic.Bool
}

// attemptSpan is the span of one attempt. It doubles as the wrapper of the
// response body, saving an allocation per request: the body's end ends the
// span, and the call's too when the response is the call's.
type attemptSpan struct {
	trace.Span
	n       int                  // the attempt's number, 1 for the first
	request []attribute.KeyValue // the request's attributes
	// What pooltrace's observer saw, kept for end, which records all the
	// attributes at once: each call of SetAttributes grows the span's
	// attribute slice. The observer runs on the goroutine of RoundTrip,
	// before it returns.
	proto                    string
	idle                     time.Duration
	hasConn, reused, wasIdle bool
	resends                  int

	body    io.ReadCloser
	status  int
	call    *callSpan   // set by the call layer when the response is the call's
	closing atomic.Bool // the caller closes the body
	ended   atomic.Bool
}

func (t *Tracer) call(next http.RoundTripper) http.RoundTripper {
	return &callRT{wrapped: wrapped{next: next}, t: t}
}

func (t *Tracer) attempt(next http.RoundTripper) http.RoundTripper {
	return &attemptRT{wrapped: wrapped{next: next}, t: t}
}

type callRT struct {
	wrapped
	t *Tracer
}

func (rt *callRT) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	attrs := rt.t.requestAttributes(req)
	_, span := rt.t.tracer.Start(parent, spanName(req.Method), internalKind, trace.WithAttributes(attrs...))
	cs := &callSpan{Span: span, request: attrs}
	resp, err := rt.next.RoundTrip(req.WithContext(trace.ContextWithSpan(parent, cs)))
	if err != nil {
		cs.end(0, err)
		return nil, err
	}
	if as, ok := resp.Body.(*attemptSpan); ok && !as.ended.Load() {
		// The attempt's span ends with the body, and the call's with it.
		as.call = cs
		return resp, nil
	}
	cs.end(resp.StatusCode, nil)
	return resp, nil
}

// end ends the call's span with the final status or error.
func (cs *callSpan) end(status int, err error) {
	if !cs.ended.CompareAndSwap(false, true) {
		return
	}
	if cs.IsRecording() {
		attrs := make([]attribute.KeyValue, 1, 4)
		attrs[0] = AttemptsKey.Int(int(cs.attempts.Load()))
		cs.SetAttributes(outcome(cs.Span, attrs, status, err)...)
	}
	cs.Span.End()
}

type attemptRT struct {
	wrapped
	t *Tracer
}

func (rt *attemptRT) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	as := &attemptSpan{n: 1}
	if cs, ok := trace.SpanFromContext(parent).(*callSpan); ok {
		as.n, as.request = int(cs.attempts.Add(1)), cs.request
	} else {
		as.request = rt.t.requestAttributes(req)
	}
	// The request's attributes are recorded when the span ends, with the
	// rest, in one slice: the sampler decides on the call's span, which has
	// them at its start, and the attempts follow it (sdktrace.ParentBased,
	// the SDK's default).
	_, as.Span = rt.t.tracer.Start(parent, spanName(req.Method), clientKind)
	ctx := trace.ContextWithSpan(parent, as)
	out := req.WithContext(ctx)
	if rt.t.propagator != nil {
		// The caller's request is never modified: the headers are a copy.
		out.Header = req.Header.Clone()
		if out.Header == nil {
			out.Header = http.Header{}
		}
		rt.t.propagator.Inject(ctx, headerCarrier(out.Header))
	}
	resp, err := rt.next.RoundTrip(out)
	if err != nil {
		as.end(0, err)
		return nil, err
	}
	as.status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		// An upgraded connection belongs to the caller: the span ends at
		// the headers, and the body is not wrapped.
		as.end(resp.StatusCode, nil)
		return resp, nil
	}
	as.body = resp.Body
	resp.Body = as
	return resp, nil
}

// maxAttemptAttributes bounds the attributes of an attempt's span: five of
// the request, and at most nine of the attempt.
const maxAttemptAttributes = 14

// endAttributes sets the span's status and returns the attributes end
// records, in a slice of their exact length: the span copies them into one
// of its own, so each one costs twice.
func (as *attemptSpan) endAttributes(status int, err error) []attribute.KeyValue {
	var buf [maxAttemptAttributes]attribute.KeyValue // on the stack
	attrs := append(buf[:0], as.request...)
	attrs = append(attrs, AttemptKey.Int(as.n))
	if as.n > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(as.n-1))
	}
	if as.hasConn {
		attrs = append(attrs, semconv.NetworkProtocolVersion(protocolVersion(as.proto)), ConnectionReusedKey.Bool(as.reused))
		if as.reused && as.wasIdle {
			attrs = append(attrs, ConnectionIdleKey.Float64(as.idle.Seconds()))
		}
	}
	if as.resends > 0 {
		attrs = append(attrs, NetHTTPResendsKey.Int(as.resends))
	}
	if err != nil && !canceled(err) {
		attrs = append(attrs, FailureClassKey.String(label(classLabels, retry.Classify(err))))
	}
	attrs = outcome(as.Span, attrs, status, err)
	exact := make([]attribute.KeyValue, len(attrs))
	copy(exact, attrs)
	return exact
}

// Read reads the response body; the span ends at its end or error.
func (as *attemptSpan) Read(p []byte) (int, error) {
	n, err := as.body.Read(p)
	switch {
	case err == io.EOF || err != nil && as.closing.Load():
		// A read that fails because the caller closed the body, as
		// client-go does to stop a watch while its decoder reads, ends
		// the span as the close does.
		as.end(as.status, nil)
	case err != nil:
		as.end(as.status, err)
	}
	return n, err
}

// Close closes the response body and ends the span.
func (as *attemptSpan) Close() error {
	as.closing.Store(true)
	err := as.body.Close()
	as.end(as.status, nil)
	return err
}

// end ends the attempt's span, and the call's when the response is the
// call's.
func (as *attemptSpan) end(status int, err error) {
	if !as.ended.CompareAndSwap(false, true) {
		return
	}
	if as.IsRecording() {
		as.SetAttributes(as.endAttributes(status, err)...)
	}
	as.Span.End()
	if as.call != nil {
		as.call.end(status, err)
	}
}

// outcome sets span's status and appends to attrs the attributes of a
// status or an error, as the HTTP client conventions say: a status of 400
// or more, or an error, is an error. A context the caller canceled (a
// watch it stopped) is not.
func outcome(span trace.Span, attrs []attribute.KeyValue, status int, err error) []attribute.KeyValue {
	if err != nil && status > 0 {
		// The body failed after the headers: the status was received.
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	switch {
	case err != nil && canceled(err):
		return append(attrs, semconv.ErrorTypeKey.String("canceled"))
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
		return append(attrs, semconv.ErrorTypeKey.String(errorType(err)))
	case status >= 400:
		span.SetStatus(codes.Error, "")
		return append(attrs, semconv.HTTPResponseStatusCode(status), semconv.ErrorTypeKey.String(strconv.Itoa(status)))
	case status > 0:
		return append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	return attrs
}

// lastCause returns, for the error of a call retry gave up on, the last
// attempt's error, which ended the call: retry's error unwraps to every
// attempt's, and errors.Is and errors.As would find an earlier one first.
func lastCause(err error) error {
	var re *retry.Error
	if errors.As(err, &re) && len(re.Causes) > 0 {
		return re.Causes[len(re.Causes)-1]
	}
	return err
}

// canceled reports whether err ends a call or attempt its caller canceled.
func canceled(err error) bool {
	return errors.Is(lastCause(err), context.Canceled)
}

// errorType is the error.type of err: a few values that say what
// happened, and "_OTHER".
func errorType(err error) string {
	err = lastCause(err)
	var be *retry.BodyError
	if errors.As(err, &be) {
		// First: the caller's body reader may fail with any error.
		return "request_body"
	}
	var te *timeout.Error
	switch {
	case errors.As(err, &te):
		return "timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection_reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "eof"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// headerCarrier is propagation.HeaderCarrier with the canonical names of
// the W3C headers written out, which saves canonicalizing them on every
// request.
type headerCarrier http.Header

func (c headerCarrier) Get(key string) string { return propagation.HeaderCarrier(c).Get(key) }

func (c headerCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		key = "Traceparent"
	case "tracestate":
		key = "Tracestate"
	case "baggage":
		key = "Baggage"
	default:
		key = http.CanonicalHeaderKey(key)
	}
	c[key] = []string{value}
}

func (c headerCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

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
		span.SetAttributes(RetryStopKey.String(label(reasonLabels, d.Reason)))
		return
	}
	why := FailureClassKey.String(label(classLabels, d.Class))
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
	span.SetAttributes(TimeoutPhaseKey.String(label(phaseLabels, e.Phase)), TimeoutLimitKey.Float64(e.Limit.Seconds()))
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

// spanName is the name of a span of a request with method m: the method,
// or "HTTP" for one the conventions do not know.
func spanName(m string) string {
	switch {
	case m == "":
		return http.MethodGet
	case knownMethod(m):
		return m
	}
	return "HTTP"
}

func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// hostPort returns the host and port of u, the port from the scheme when
// u names none.
func hostPort(u *url.URL) (string, int) {
	host, port := u.Hostname(), u.Port()
	if p, err := strconv.Atoi(port); err == nil && p > 0 && p < 65536 {
		return host, p
	}
	switch u.Scheme {
	case "https":
		return host, 443
	case "http":
		return host, 80
	}
	return host, 0
}

// redacted returns u as url.full: user name and password replaced by
// "REDACTED", as the conventions ask.
func redacted(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.UserPassword("REDACTED", "REDACTED")
	return c.String()
}

func protocolVersion(proto string) string {
	switch proto {
	case "HTTP/2.0":
		return "2"
	case "HTTP/1.0":
		return "1.0"
	}
	return "1.1"
}

// The attribute values of the retry classes, the reasons retrying stops
// and the deadline phases, indexed by their values: the metrics module's
// label values.
var (
	classLabels  = []string{retry.NotRetryable: "not_retryable", retry.NotSent: "not_sent", retry.MaybeSent: "maybe_sent"}
	reasonLabels = []string{
		retry.ReasonNotRetryable: "not_retryable", retry.ReasonNotIdempotent: "not_idempotent",
		retry.ReasonBodyNotRewindable: "body_not_rewindable", retry.ReasonAttempts: "attempts",
		retry.ReasonDeadline: "deadline", retry.ReasonCanceled: "canceled", retry.ReasonBudget: "budget",
		retry.ReasonRetryAfter: "retry_after", retry.ReasonMaybeApplied: "maybe_applied",
	}
	phaseLabels = []string{timeout.PhaseHeaders: "headers", timeout.PhaseBody: "body", timeout.PhaseStalled: "stalled"}
)

// label returns the value of v in values, or "other" for a value a newer
// release added.
func label[V ~int](values []string, v V) string {
	if v >= 0 && int(v) < len(values) && values[v] != "" {
		return values[v]
	}
	return "other"
}

// failing fails every request with err, without sending it.
type failing struct {
	wrapped
	err error
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return nil, f.err
}

// wrapped is embedded by the RoundTrippers of this package: it gives them
// WrappedRoundTripper (apimachinery's utilnet.RoundTripperWrapper) and
// forwards CloseIdleConnections; the pool belongs to the base transport.
type wrapped struct {
	next http.RoundTripper
}

func (w wrapped) WrappedRoundTripper() http.RoundTripper { return w.next }

func (w wrapped) CloseIdleConnections() {
	if c, ok := w.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// isNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface (kubeadapter keeps its own copy: nothing is
// internal across modules).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
