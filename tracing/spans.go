package tracing

import (
	"io"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.24.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/tracing/internal/shared"
)

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
		attrs = append(attrs, FailureClassKey.String(shared.Label(shared.ClassLabels, retry.Classify(err))))
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
