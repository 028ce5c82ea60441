package timeout

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kubewire/kubewire/internal/hooks"
	"github.com/kubewire/kubewire/transport"
)

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	timeout     time.Duration
	longRunning func(*http.Request) bool
	stall       time.Duration
	observer    func(Exceeded)
	err         error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = &transport.ConfigError{Err: fmt.Errorf("timeout: "+format, args...)}
	}
}

// WithLongRunning replaces the classifier of long-running requests, which
// are bounded only until their response headers. A nil func makes no
// request long-running. Default: [LongRunning].
func WithLongRunning(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.longRunning = f })
}

// WithStallTimeout turns on a no-progress watchdog for the body of
// long-running requests: a stream that delivers no bytes for d is cut with
// an [*Error] of [PhaseStalled]. Watches that see no events for a while are
// silent, so choose d well above the longest quiet period you expect (the
// API server ends a watch after 30 to 60 minutes by itself). Default: off.
// Must be positive.
func WithStallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.stall = d
		if d <= 0 {
			c.fail("WithStallTimeout must be positive, got %v", d)
		}
	})
}

// Exceeded describes a request whose timeout, or stall timeout, ran out.
type Exceeded struct {
	// Request is the request as the middleware received it. Observers must
	// not modify it or read its body.
	Request *http.Request
	// Phase says where the request was.
	Phase Phase
	// Limit is the request's timeout, or the stall timeout for
	// PhaseStalled.
	Limit time.Duration
	// Elapsed is the time since RoundTrip was called.
	Elapsed time.Duration
}

// WithObserver calls f when a request's timeout or stall timeout runs out,
// from the timer's goroutine, before the request is cancelled. f must not
// block. Observers add up: each one given is called, in order. Must not be
// nil. Default: none.
func WithObserver(f func(Exceeded)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithObserver must not be nil")
			return
		}
		c.observer = hooks.Then(c.observer, f)
	})
}

func newConfig(d time.Duration, opts []Option) config {
	c := config{timeout: d, longRunning: LongRunning}
	if d <= 0 {
		c.fail("the timeout of timeout.New must be positive, got %v", d)
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Check reports the error that New(d, opts...) would return from every
// request, or nil if the configuration is valid.
func Check(d time.Duration, opts ...Option) error {
	c := newConfig(d, opts)
	return c.err
}
