package stack

import (
	"time"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retry     []retry.Option
	pooltrace []pooltrace.Option
	timeout   []timeout.Option
	call      []transport.Middleware
	attempt   []transport.Middleware
}

// WithRetryOptions passes opts to the retry layer, after those given
// before. Default: none, retry.New's defaults.
func WithRetryOptions(opts ...retry.Option) Option {
	return optionFunc(func(c *config) { c.retry = append(c.retry, opts...) })
}

// WithPooltraceOptions passes opts to the pooltrace layer, after those
// given before. Default: none, pooltrace.New's defaults.
func WithPooltraceOptions(opts ...pooltrace.Option) Option {
	return optionFunc(func(c *config) { c.pooltrace = append(c.pooltrace, opts...) })
}

// WithTimeoutOptions passes opts to the timeout layer, after those given
// before. Default: none, timeout.New's defaults.
func WithTimeoutOptions(opts ...timeout.Option) Option {
	return optionFunc(func(c *config) { c.timeout = append(c.timeout, opts...) })
}

// WithCallMiddleware adds m above retry, where it sees each call once,
// whatever the number of attempts, with the caller's deadline: the place
// for what spans a whole call, such as the call span of package tracing.
// Middleware given in several calls sit in the order given, the first
// outermost. A nil m is skipped. Default: none.
func WithCallMiddleware(m transport.Middleware) Option {
	return optionFunc(func(c *config) { c.call = append(c.call, m) })
}

// WithAttemptMiddleware adds m between retry and pooltrace, where it sees
// each attempt: every request retry sends, with the context pooltrace's
// and timeout's observers then find on [pooltrace.Attempt.Request] and
// [timeout.Exceeded.Request]. It is the place for what belongs to one
// attempt, such as a span and the trace context it puts on the request.
// Middleware given in several calls sit in the order given, the first
// outermost. A nil m is skipped. Default: none.
func WithAttemptMiddleware(m transport.Middleware) Option {
	return optionFunc(func(c *config) { c.attempt = append(c.attempt, m) })
}

// Check reports the error that New(d, opts...) would return from every
// request, or nil.
func Check(d time.Duration, opts ...Option) error {
	c := newConfig(opts)
	if err := retry.Check(c.retry...); err != nil {
		return err
	}
	if err := pooltrace.Check(c.pooltrace...); err != nil {
		return err
	}
	return timeout.Check(d, c.timeout...)
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// New returns the stack, in the order the package documentation gives, with
// d the deadline of each attempt from when it is sent to the end of its
// response body (timeout.New). The RoundTrippers it returns are safe for
// concurrent use. An invalid d or option does not panic: every request
// fails, without being sent, with a *transport.ConfigError that names it,
// as each layer's New does.
func New(d time.Duration, opts ...Option) transport.Middleware {
	c := newConfig(opts)
	layers := make([]transport.Middleware, 0, len(c.call)+len(c.attempt)+4)
	layers = append(layers, c.call...)
	layers = append(layers, retry.New(c.retry...))
	layers = append(layers, c.attempt...)
	// retry.NoReplay, with retry's options, holds net/http's own re-sends
	// to retry's resend rule for the headers the attempt middleware set.
	layers = append(layers, pooltrace.New(c.pooltrace...), timeout.New(d, c.timeout...), retry.NoReplay(c.retry...))
	return transport.Chain(layers...)
}
