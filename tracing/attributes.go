package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.24.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

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
