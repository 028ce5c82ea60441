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

// New returns the stack: retry over pooltrace over timeout, with d the
// deadline of each attempt, from when it is sent to the end of its
// response body (timeout.New). The RoundTrippers it returns are safe for
// concurrent use. An invalid d or option does not panic: every request
// fails, without being sent, with a *transport.ConfigError that names it,
// as each layer's New does.
func New(d time.Duration, opts ...Option) transport.Middleware {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return transport.Chain(
		retry.New(c.retry...),
		pooltrace.New(c.pooltrace...),
		timeout.New(d, c.timeout...),
	)
}
