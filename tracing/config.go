package tracing

import (
	"fmt"

	"go.opentelemetry.io/otel/propagation"

	"github.com/kubewire/kubewire/tracing/internal/shared"
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
		if p == nil || shared.IsNil(p) {
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
