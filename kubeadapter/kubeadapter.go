package kubeadapter

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	clientgofeatures "k8s.io/client-go/features"
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
// PING after readIdle without frames (http.HTTP2Config.SendPingTimeout),
// and the connection closed if the PING is not answered within pingTimeout
// (http.HTTP2Config.PingTimeout). Default: client-go's, from the
// environment (30s and 15s unless overridden). Both must be positive.
//
// It never does nothing silently. When it cannot apply, [Apply] returns an
// error that says why, because a health check the caller asked for and did
// not get is a configuration mistake, found best before the first client
// exists. Apply refuses when:
//
//   - HTTP/2 is off: DISABLE_HTTP2 is set in the environment, the config's
//     TLSClientConfig.NextProtos leaves out "h2", or rest.Config.Transport
//     is an *http.Transport without HTTP/2;
//   - rest.Config.Transport is not an *http.Transport;
//   - client-go will reload the CA file (TLSClientConfig.CAFile without
//     CAData, with client-go's ClientsAllowCARotation feature on, its
//     default): client-go then hides the base transport in a holder that
//     swaps it when the file changes, and a clone would stop following the
//     CA. Give the CA as CAData, or leave WithHTTP2Health out.
//
// What only shows when client-go builds the transport (a base transport of
// another kind, HTTP/2 turned off in a way Apply cannot see) is logged once
// per Apply, as an error through the [WithLogger] logger (logr has no
// warning level), and the client keeps client-go's own transport. [Wrap]
// has no rest.Config to check, so for it the log is the only report.
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
// It returns an error naming the option for invalid options, or saying why
// [WithHTTP2Health] cannot apply to cfg, and leaves cfg unchanged then.
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
	if c.http2 {
		if err := healthApplies(cfg); err != nil {
			return err
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
		h := newHealth(c.readIdle, c.pingTimeout, c.logger)
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
// over an *http.Transport with HTTP/2 on; otherwise it logs why once, as
// an error through the [WithLogger] logger. Invalid options make every
// request fail with an error naming the option; validate them with [Check].
func Wrap(opts ...Option) k8stransport.WrapperFunc {
	c := newConfig(opts)
	if !c.budgetSet {
		c.budget = DefaultTimeout
	}
	stack := c.stack()
	if !c.http2 || c.err != nil {
		return stack
	}
	h := newHealth(c.readIdle, c.pingTimeout, c.logger)
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

// healthApplies returns why WithHTTP2Health cannot apply to cfg, or nil.
// It checks what the config alone decides; health.wrap reports the rest.
func healthApplies(cfg *rest.Config) error {
	const prefix = "kubeadapter: WithHTTP2Health cannot apply: "
	if cfg.Transport != nil {
		t, ok := cfg.Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf(prefix+"it needs client-go's transport or an *http.Transport, got rest.Config.Transport of type %T", cfg.Transport)
		}
		if !http2Enabled(t) {
			return errors.New(prefix + "rest.Config.Transport has HTTP/2 off")
		}
		return nil
	}
	// The checks of apimachinery's utilnet.SetTransportDefaults.
	if os.Getenv("DISABLE_HTTP2") != "" {
		return errors.New(prefix + "HTTP/2 is off: DISABLE_HTTP2 is set")
	}
	if np := cfg.TLSClientConfig.NextProtos; len(np) > 0 && !slices.Contains(np, "h2") {
		return fmt.Errorf(prefix+"HTTP/2 is off: rest.Config.TLSClientConfig.NextProtos is %q", np)
	}
	// client-go's transport.loadTLSFiles and tlsTransportCache.get.
	if cfg.TLSClientConfig.CAFile != "" && len(cfg.TLSClientConfig.CAData) == 0 &&
		clientgofeatures.FeatureGates().Enabled(clientgofeatures.ClientsAllowCARotation) {
		return fmt.Errorf(prefix+"client-go reloads the CA file %s (feature ClientsAllowCARotation) through a transport it swaps when the file changes, which a clone would not follow; give the CA as CAData", cfg.TLSClientConfig.CAFile)
	}
	return nil
}

// http2Enabled reports whether t will speak HTTP/2 over TLS, by the rules
// of net/http's Transport.protocols on Go 1.26 and 1.27: Protocols if set
// (x/net/http2's ConfigureTransports sets it on Go 1.27), else an "h2" entry
// in TLSNextProto (ConfigureTransports on Go 1.26), else the default, which
// a custom TLS config or dialer turns off unless ForceAttemptHTTP2.
func http2Enabled(t *http.Transport) bool {
	switch {
	case t.Protocols != nil:
		return t.Protocols.HTTP2()
	case t.TLSNextProto != nil:
		return t.TLSNextProto["h2"] != nil
	case t.ForceAttemptHTTP2:
		return true
	}
	return t.TLSClientConfig == nil && t.Dial == nil && t.DialContext == nil && t.DialTLS == nil && t.DialTLSContext == nil
}

// health gives a client its own clone of client-go's base transport with
// its own HTTP/2 health-check timings. One clone per base transport, shared
// by every client built from the config.
type health struct {
	readIdle, ping time.Duration
	logger         logr.Logger
	warned         sync.Once

	mu sync.Mutex
	// clones is keyed by the RoundTripper client-go handed over. Keeping it
	// referenced keeps client-go's transport cache entry, and the
	// certificate-rotation goroutine tied to its lifetime, alive.
	clones map[http.RoundTripper]*http.Transport
}

func newHealth(readIdle, ping time.Duration, logger logr.Logger) *health {
	return &health{readIdle: readIdle, ping: ping, logger: logger, clones: map[http.RoundTripper]*http.Transport{}}
}

// baseTransport returns the *http.Transport under rt: rt itself, or the one
// inside client-go's trackedTransport, the pass-through wrapper its TLS
// cache puts around cached transports. Any other wrapper (client-go's
// atomicTransportHolder, which swaps transports when a CA file changes, or
// a user's RoundTripper) is not looked into: cloning below it would break
// what it does. The error names what was found instead.
func baseTransport(rt http.RoundTripper) (*http.Transport, error) {
	typ := reflect.TypeOf(rt)
	if typ != nil && typ.Kind() == reflect.Pointer && typ.Elem().PkgPath() == "k8s.io/client-go/transport" && typ.Elem().Name() == "trackedTransport" {
		if w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper }); ok {
			rt = w.WrappedRoundTripper()
		}
	}
	if t, ok := rt.(*http.Transport); ok {
		return t, nil
	}
	return nil, fmt.Errorf("the base transport is a %T, not an *http.Transport it may clone", rt)
}

func (h *health) wrap(rt http.RoundTripper) http.RoundTripper {
	base, err := baseTransport(rt)
	if err != nil {
		h.warn(err)
		return rt
	}
	if !http2Enabled(base) {
		h.warn(errors.New("the base transport has HTTP/2 off"))
		return rt
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clones[rt]; ok {
		return c
	}
	// Clone keeps TLSClientConfig (CA, client certificates and the
	// certificate callback of exec plugins), the dialer (exec plugins'
	// connection tracker) and the proxy. It does not keep an HTTP/2
	// implementation registered through x/net/http2 (Go 1.26: TLSNextProto;
	// Go 1.27: the transport's registered HTTP/2 config), which is bound to
	// the original's timings, so the clone uses net/http's own HTTP/2 with
	// its timings in HTTP2.
	c := base.Clone()
	c.TLSNextProto = nil
	if c.Protocols == nil {
		c.Protocols = new(http.Protocols)
		c.Protocols.SetHTTP1(true)
	}
	c.Protocols.SetHTTP2(true)
	if c.HTTP2 == nil {
		c.HTTP2 = &http.HTTP2Config{}
	}
	c.HTTP2.SendPingTimeout = h.readIdle
	c.HTTP2.PingTimeout = h.ping
	h.clones[rt] = c
	return c
}

// warn logs once why the health check does not apply.
func (h *health) warn(err error) {
	h.warned.Do(func() {
		h.logger.Error(err, "kubeadapter: WithHTTP2Health does not apply; the client keeps client-go's HTTP/2 health check")
	})
}
