package kubeadapter

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
	k8stransport "k8s.io/client-go/transport"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// DefaultTimeout is the per-attempt budget when neither [WithTimeout] nor
// rest.Config.Timeout sets one.
const DefaultTimeout = 30 * time.Second

// Option configures [Apply] and [Wrap].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	budget       time.Duration
	budgetSet    bool
	stall        time.Duration
	readIdle     time.Duration
	pingTimeout  time.Duration
	http2        bool
	logger       logr.Logger
	observer     func(pooltrace.Attempt)
	retryOptions []retry.Option
	err          error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("kubeadapter: "+format, args...)
	}
}

// WithTimeout sets the per-attempt budget. Default: the config's Timeout if
// it is set, else [DefaultTimeout]. Must be positive.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.budget, c.budgetSet = d, true
		if d <= 0 {
			c.fail("WithTimeout must be positive, got %v", d)
		}
	})
}

// WithStallTimeout cuts a long-running response (a watch, a log stream)
// that delivers no bytes for d. Choose d above the longest quiet period of
// your watches. Default: off. Must be positive.
func WithStallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.stall = d
		if d <= 0 {
			c.fail("WithStallTimeout must be positive, got %v", d)
		}
	})
}

// WithHTTP2Health sets the HTTP/2 health check of this config's clients: a
// PING after readIdle without frames, and the connection closed if the PING
// is not answered within pingTimeout. Default: client-go's, from the
// environment (30s and 15s unless overridden). Both must be positive.
func WithHTTP2Health(readIdle, pingTimeout time.Duration) Option {
	return optionFunc(func(c *config) {
		c.readIdle, c.pingTimeout, c.http2 = readIdle, pingTimeout, true
		switch {
		case readIdle <= 0:
			c.fail("WithHTTP2Health readIdle must be positive, got %v", readIdle)
		case pingTimeout <= 0:
			c.fail("WithHTTP2Health pingTimeout must be positive, got %v", pingTimeout)
		}
	})
}

// WithLogger sets the logger of the stack, used when a request's context
// carries none. Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithObserver calls f for every request attempt (see pooltrace.WithObserver).
// Default: none.
func WithObserver(f func(pooltrace.Attempt)) Option {
	return optionFunc(func(c *config) { c.observer = f })
}

// WithRetryOptions passes options to retry.New, for example
// retry.WithMaxAttempts. Default: retry's defaults. Long-running requests
// stay exempt.
func WithRetryOptions(opts ...retry.Option) Option {
	return optionFunc(func(c *config) {
		c.retryOptions = append(c.retryOptions, opts...)
		if err := retry.Check(opts...); err != nil {
			c.fail("WithRetryOptions: %v", err)
		}
	})
}

func newConfig(opts []Option) config {
	c := config{logger: logr.Discard()}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Check reports the error that Apply would return for opts, or nil.
func Check(opts ...Option) error {
	c := newConfig(opts)
	return c.err
}

// Apply installs the kubewire stack on cfg (see the package
// documentation). Existing WrapTransport wrappers keep working and keep
// their order. cfg.Timeout becomes the per-attempt budget unless
// [WithTimeout] is given, and is set to zero. Calling Apply again on the
// same config, or a copy of it, changes nothing and returns nil.
//
// It returns an error naming the option for invalid options, and leaves cfg
// unchanged then.
func Apply(cfg *rest.Config, opts ...Option) error {
	if cfg == nil {
		return errors.New("kubeadapter: Apply: nil *rest.Config")
	}
	c := newConfig(opts)
	if c.err != nil {
		return c.err
	}
	if cfg.Timeout < 0 {
		return fmt.Errorf("kubeadapter: rest.Config.Timeout must not be negative, got %v", cfg.Timeout)
	}
	if applied(cfg) {
		return nil
	}
	if c.http2 && cfg.Transport != nil {
		if _, ok := cfg.Transport.(*http.Transport); !ok {
			return fmt.Errorf("kubeadapter: WithHTTP2Health needs client-go's transport or an *http.Transport, got rest.Config.Transport of type %T", cfg.Transport)
		}
	}
	if !c.budgetSet {
		c.budget = DefaultTimeout
		if cfg.Timeout > 0 {
			c.budget = cfg.Timeout
		}
	}
	if c.http2 {
		// Innermost, so that it sees the base transport itself.
		h := newHealth(c.readIdle, c.pingTimeout)
		cfg.WrapTransport = k8stransport.Wrappers(h.wrap, cfg.WrapTransport)
	}
	cfg.Wrap(c.stack())
	cfg.Timeout = 0
	return nil
}

// Wrap returns the kubewire stack as a client-go WrapperFunc, for programs
// that assemble their own transport. It does not touch a rest.Config, so it
// does not move rest.Config.Timeout; set the budget with [WithTimeout].
// [WithHTTP2Health] applies only when Wrap is the innermost wrapper, right
// over an *http.Transport. Invalid options make every request fail with an
// error naming the option; validate them with [Check].
func Wrap(opts ...Option) k8stransport.WrapperFunc {
	c := newConfig(opts)
	if !c.budgetSet {
		c.budget = DefaultTimeout
	}
	stack := c.stack()
	if !c.http2 || c.err != nil {
		return stack
	}
	h := newHealth(c.readIdle, c.pingTimeout)
	return func(rt http.RoundTripper) http.RoundTripper { return stack(h.wrap(rt)) }
}

func (c *config) stack() k8stransport.WrapperFunc {
	if c.err != nil {
		err := c.err
		return func(rt http.RoundTripper) http.RoundTripper {
			return &failing{Wrapped: transport.Wrapped{Next: rt}, err: err}
		}
	}
	ropts := append([]retry.Option{retry.WithLogger(c.logger), retry.WithExempt(timeout.LongRunning)}, c.retryOptions...)
	popts := []pooltrace.Option{pooltrace.WithLogger(c.logger)}
	if c.observer != nil {
		popts = append(popts, pooltrace.WithObserver(c.observer))
	}
	var topts []timeout.Option
	if c.stall > 0 {
		topts = append(topts, timeout.WithStallTimeout(c.stall))
	}
	chain := transport.Chain(retry.New(ropts...), pooltrace.New(popts...), timeout.New(c.budget, topts...))
	return func(rt http.RoundTripper) http.RoundTripper {
		return &stack{Wrapped: transport.Wrapped{Next: chain(rt)}}
	}
}

// stack marks the kubewire stack in a chain of wrappers, so that Apply can
// tell it is already there.
type stack struct {
	transport.Wrapped
}

func (s *stack) RoundTrip(req *http.Request) (*http.Response, error) { return s.Next.RoundTrip(req) }

// probe stands in for the base transport while Apply looks for its stack.
type probe struct{}

func (probe) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("kubeadapter: probe")
}

// applied reports whether cfg's wrappers already hold a kubewire stack. It
// builds the wrapper chain over a probe and walks it; a wrapper that does
// not implement WrappedRoundTripper hides what is below it.
func applied(cfg *rest.Config) bool {
	if cfg.WrapTransport == nil {
		return false
	}
	rt := cfg.WrapTransport(probe{})
	for rt != nil {
		if _, ok := rt.(*stack); ok {
			return true
		}
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			return false
		}
		rt = w.WrappedRoundTripper()
	}
	return false
}

// failing reports a configuration error for every request, without sending
// it.
type failing struct {
	transport.Wrapped
	err error
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	transport.CloseRequestBody(req)
	return nil, f.err
}

// health gives a client its own clone of client-go's base transport with
// its own HTTP/2 health-check timings. One clone per base transport, shared
// by every client built from the config.
type health struct {
	readIdle, ping time.Duration

	mu sync.Mutex
	// clones is keyed by the RoundTripper client-go handed over. Keeping it
	// referenced keeps client-go's transport cache entry, and the
	// certificate-rotation goroutine tied to its lifetime, alive.
	clones map[http.RoundTripper]*http.Transport
}

func newHealth(readIdle, ping time.Duration) *health {
	return &health{readIdle: readIdle, ping: ping, clones: map[http.RoundTripper]*http.Transport{}}
}

// baseTransport returns the *http.Transport under rt: rt itself, or the one
// inside client-go's trackedTransport, the pass-through wrapper its TLS
// cache puts around cached transports. Any other wrapper (client-go's
// atomicTransportHolder, which swaps transports when a CA file changes, or
// a user's RoundTripper) is not looked into: cloning below it would break
// what it does.
func baseTransport(rt http.RoundTripper) (*http.Transport, bool) {
	if t, ok := rt.(*http.Transport); ok {
		return t, true
	}
	typ := reflect.TypeOf(rt)
	if typ.Kind() != reflect.Pointer || typ.Elem().PkgPath() != "k8s.io/client-go/transport" || typ.Elem().Name() != "trackedTransport" {
		return nil, false
	}
	w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
	if !ok {
		return nil, false
	}
	t, ok := w.WrappedRoundTripper().(*http.Transport)
	return t, ok
}

func (h *health) wrap(rt http.RoundTripper) http.RoundTripper {
	base, ok := baseTransport(rt)
	if !ok {
		return rt
	}
	if _, ok := base.TLSNextProto["h2"]; !ok {
		// HTTP/2 is off for this transport (DISABLE_HTTP2, or a TLS config
		// that does not offer it): nothing to tune.
		return rt
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clones[rt]; ok {
		return c
	}
	// Clone keeps TLSClientConfig (CA, client certificates and the
	// certificate callback of exec plugins), the dialer (exec plugins'
	// connection tracker) and the proxy. The HTTP/2 upgrade of the original
	// is bound to its health-check settings, so it is replaced.
	c := base.Clone()
	c.TLSNextProto = nil
	t2, err := http2.ConfigureTransports(c)
	if err != nil {
		return rt
	}
	t2.ReadIdleTimeout = h.readIdle
	t2.PingTimeout = h.ping
	h.clones[rt] = c
	return c
}
