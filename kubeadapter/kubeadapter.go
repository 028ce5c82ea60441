package kubeadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	k8stransport "k8s.io/client-go/transport"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// DefaultTimeout is the per-attempt timeout when neither [WithTimeout] nor
// rest.Config.Timeout sets one.
const DefaultTimeout = 30 * time.Second

// Option configures [Apply] and [Wrap].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	timeout      time.Duration
	timeoutSet   bool
	stall        time.Duration
	readIdle     time.Duration
	pingTimeout  time.Duration
	http2        bool
	idle         time.Duration
	logger       logr.Logger
	observers    []Observer
	retryOptions []retry.Option
	stackOptions []stack.Option
	err          error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = &transport.ConfigError{Err: fmt.Errorf("kubeadapter: "+format, args...)}
	}
}

// WithTimeout sets the per-attempt timeout. Default: the config's Timeout
// if it is set, else [DefaultTimeout]. Must be positive.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.timeout, c.timeoutSet = d, true
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
//     TLSClientConfig.NextProtos leaves out "h2", rest.Config.Transport
//     is an *http.Transport without HTTP/2, or the server is plain http
//     (kubectl proxy serves it) and rest.Config.Transport does not ask for
//     HTTP/2 without TLS (Protocols.UnencryptedHTTP2);
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

// WithIdleConnTimeout sets how long this config's clients keep an idle
// pooled connection, HTTP/1.1 or HTTP/2, before closing it
// (http.Transport.IdleConnTimeout; see the package documentation). Keep d
// below the shortest idle limit on the path, which kubewire probe
// measures. Default: client-go's 90s. Must be positive.
//
// Like [WithHTTP2Health], it gives the clients their own clone of
// client-go's base transport, and Apply refuses with an error when it
// cannot: when rest.Config.Transport is not an *http.Transport, or when
// client-go will reload the CA file. A clone of a transport with HTTP/2 on
// keeps its HTTP/2 health check unless WithHTTP2Health sets it: the
// timings in http.Transport.HTTP2 if it has them, else client-go's
// (HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS, 30s and
// 15s by default), which are also what a rest.Config.Transport configured
// through x/net/http2 gets, since its own are out of reach.
func WithIdleConnTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.idle = d
		if d <= 0 {
			c.fail("WithIdleConnTimeout must be positive, got %v", d)
		}
	})
}

// WithRetryOptions passes options to retry.New, for example
// retry.WithMaxAttempts. Default: retry's defaults, but for the resend
// rule, which is [Resendable] (Kubernetes' rule); a retry.WithResendable
// given here replaces it. Long-running requests stay exempt.
func WithRetryOptions(opts ...retry.Option) Option {
	return optionFunc(func(c *config) {
		c.retryOptions = append(c.retryOptions, opts...)
		if err := retry.Check(opts...); err != nil {
			c.fail("WithRetryOptions: %v", err)
		}
	})
}

// WithStackOptions passes options to the stack, after kubeadapter's own:
// middleware for each call or each attempt (stack.WithCallMiddleware,
// stack.WithAttemptMiddleware), as package tracing gives, and options of
// the layers, which add to those kubeadapter sets. Options that replace a
// setting (retry.WithResendable, timeout.WithLongRunning) replace
// kubeadapter's. Default: none.
func WithStackOptions(opts ...stack.Option) Option {
	return optionFunc(func(c *config) {
		c.stackOptions = append(c.stackOptions, opts...)
		// The deadline is checked by WithTimeout; any positive one will do.
		if err := stack.Check(time.Second, opts...); err != nil {
			c.fail("WithStackOptions: %v", err)
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
// their order. cfg.Timeout becomes the per-attempt timeout unless
// [WithTimeout] is given, and is set to zero. Calling Apply again on the
// same config, or a copy of it, changes nothing and returns nil. Apply
// never runs the config's wrappers: it knows its stack by the
// WrapTransport it set.
//
// A wrapper added with cfg.Wrap after Apply hides that WrapTransport, and
// a later Apply installs a second stack over it. Requests still meet one
// stack: at run time only the outermost acts, and a stack below one that
// acts passes each request straight through, so there is one retry layer,
// one deadline and one trace per attempt. The outermost stack's options
// are then the ones in force, but for [WithIdleConnTimeout] and
// [WithHTTP2Health], which shape the clone of the base transport: the
// first Apply's clone is made last and wins. To keep the first Apply's
// options, apply before adding wrappers, or pass the options to every
// Apply.
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
	if Applied(cfg) {
		return nil
	}
	if c.cloning() {
		if err := cloneApplies(cfg, &c); err != nil {
			return err
		}
	}
	if !c.timeoutSet {
		c.timeout = DefaultTimeout
		if cfg.Timeout > 0 {
			c.timeout = cfg.Timeout
		}
	}
	cfg.WrapTransport = (&wrapper{c.wrappers(cfg.WrapTransport)}).wrap
	cfg.Timeout = 0
	return nil
}

// Applied reports whether cfg carries the stack where [Apply] finds it:
// its WrapTransport is the one Apply set, or Wrap's set by rest.Config.Wrap
// on a config without other wrappers. Apply then changes nothing, and its
// options do not apply. A wrapper added after the stack hides it (see
// Apply).
func Applied(cfg *rest.Config) bool { return cfg != nil && ours(cfg.WrapTransport) }

// Wrap returns the kubewire stack as a client-go WrapperFunc, for programs
// that assemble their own transport. It does not touch a rest.Config, so it
// does not move rest.Config.Timeout; set the timeout with [WithTimeout].
// [WithHTTP2Health] applies only when Wrap is the innermost wrapper, right
// over an *http.Transport with HTTP/2 on; otherwise it logs why once, as
// an error through the [WithLogger] logger. Invalid options make every
// request fail with an error naming the option; validate them with [Check].
func Wrap(opts ...Option) k8stransport.WrapperFunc {
	c := newConfig(opts)
	if !c.timeoutSet {
		c.timeout = DefaultTimeout
	}
	return (&wrapper{c.wrappers(nil)}).wrap
}

// NoReplay is retry.NoReplay with Kubernetes' resend rule ([Resendable]),
// as a client-go wrapper: for a config whose own wrappers set an
// Idempotency-Key or X-Idempotency-Key header. Apply keeps those wrappers
// below the stack, over the base transport itself, which some wrappers
// need (they assert *http.Transport), so the stack cannot hold net/http's
// own re-sends to the rule there: net/http re-sends by itself a write
// with such a header when a reused HTTP/1.1 connection fails after the
// write was sent. Put NoReplay under them, before adding them:
//
//	cfg.Wrap(kubeadapter.NoReplay) // innermost: rest.Config.Wrap adds over it
//	cfg.Wrap(setsIdempotencyKey)
//	err := kubeadapter.Apply(cfg)
//
// Headers set by the caller, a call middleware or an attempt middleware
// need nothing: the stack holds those.
func NoReplay(rt http.RoundTripper) http.RoundTripper { return noReplay(rt) }

var noReplay = retry.NoReplay(retry.WithResendable(Resendable))

// wrapper holds what Apply and Wrap install. Its wrap method is the
// WrapTransport they set: every method value of it has the same code, so
// [ours] knows one without calling it, which would run the user's
// wrappers it holds.
type wrapper struct{ chain k8stransport.WrapperFunc }

func (w *wrapper) wrap(rt http.RoundTripper) http.RoundTripper { return w.chain(rt) }

var wrapCode = reflect.ValueOf((&wrapper{}).wrap).Pointer()

// ours reports whether fn is a WrapTransport that Apply or Wrap returned.
func ours(fn k8stransport.WrapperFunc) bool {
	return fn != nil && reflect.ValueOf(fn).Pointer() == wrapCode
}

// wrappers returns what Apply and Wrap install, outermost first as in
// transport.Chain (client-go's Wrappers and rest.Config.Wrap take the
// reverse order): the kubewire stack, then between (the config's own
// wrappers, which keep their order), then the clone of the base transport
// when an option needs one, innermost so that it sees the base transport
// itself.
func (c *config) wrappers(between k8stransport.WrapperFunc) k8stransport.WrapperFunc {
	layers := []transport.Middleware{c.middleware(), transport.Middleware(between)}
	if c.cloning() && c.err == nil {
		layers = append(layers, newCloner(c).wrap)
	}
	return k8stransport.WrapperFunc(transport.Chain(layers...))
}

func (c *config) middleware() transport.Middleware {
	if c.err != nil {
		err := c.err
		return func(rt http.RoundTripper) http.RoundTripper {
			return &failing{wrapped: wrap(rt), err: err}
		}
	}
	retryOpts := append([]retry.Option{retry.WithLogger(c.logger), retry.WithExempt(timeout.LongRunning),
		retry.WithResendable(Resendable)}, c.retryOptions...)
	retryOpts = append(retryOpts, retry.WithObserver(observeDecision(c.observers)))
	opts := []stack.Option{stack.WithRetryOptions(retryOpts...), stack.WithPooltraceOptions(pooltrace.WithLogger(c.logger))}
	if f := each(c.observers, func(o Observer) func(pooltrace.Attempt) { return o.ObserveAttempt }); f != nil {
		opts = append(opts, stack.WithPooltraceOptions(pooltrace.WithObserver(f)))
	}
	if c.stall > 0 {
		opts = append(opts, stack.WithTimeoutOptions(timeout.WithStallTimeout(c.stall)))
	}
	if f := each(c.observers, func(o Observer) func(timeout.Exceeded) { return o.ObserveExceeded }); f != nil {
		opts = append(opts, stack.WithTimeoutOptions(timeout.WithObserver(f)))
	}
	// recordGiveUp last: the innermost call middleware, under the user's.
	opts = append(append(opts, c.stackOptions...), stack.WithCallMiddleware(recordGiveUp))
	chain := stack.New(c.timeout, opts...)
	return func(rt http.RoundTripper) http.RoundTripper {
		return &installed{wrapped: wrapped{next: chain(rt)}, below: rt}
	}
}

// installed is the top of a kubewire stack. It marks each request's
// context with the request's URL, so that a stack below it, which a second
// Apply could not see (see [Apply]), passes that request through to what
// it wraps: one stack acts. A client that a wrapper calls with the
// request's context, for another URL, keeps its own stack.
type installed struct {
	wrapped
	below http.RoundTripper // what the stack wraps
}

// acting is the context of a request inside a kubewire stack that acts:
// the caller's, marked with the request's URL, and carrying the retry error
// the stack gave up with. It costs one allocation, as context.WithValue
// does.
type acting struct {
	context.Context
	url *url.URL
	// gaveUp is the retry error of a request the stack retried and gave
	// up on, or did not retry because the budget refused, stored by
	// [recordGiveUp] right above the retry layer: the top hands client-go
	// an [Error] by it, whatever a call middleware in between did to the
	// error.
	gaveUp atomic.Pointer[retry.Error]
}

type actingKey struct{}

// Value returns the acting context itself for actingKey{}.
func (a *acting) Value(key any) any {
	if key == (actingKey{}) {
		return a
	}
	return a.Context.Value(key)
}

// actingFor returns the acting context of ctx, or nil.
func actingFor(ctx context.Context) *acting {
	a, _ := ctx.Value(actingKey{}).(*acting)
	return a
}

// marks reports whether a marks req: the same URL, or a copy of it
// (otelhttp and http.Request.Clone copy it).
func (a *acting) marks(req *http.Request) bool {
	x, y := a.url, req.URL
	return x == y || x != nil && y != nil && x.Scheme == y.Scheme && x.Host == y.Host && x.Path == y.Path && x.RawQuery == y.RawQuery
}

func (s *installed) RoundTrip(req *http.Request) (*http.Response, error) {
	if a := actingFor(req.Context()); a != nil && a.marks(req) {
		return s.below.RoundTrip(req)
	}
	// Two allocations: the context and the request's copy.
	a := &acting{Context: req.Context(), url: req.URL}
	resp, err := s.next.RoundTrip(req.WithContext(a))
	if err != nil {
		return nil, clientGoError(err, a.gaveUp.Load())
	}
	if retry.MaybeApplied(resp) && !dryRun(req) {
		sayMaybeApplied(resp)
	}
	if resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols && timeout.LongRunning(req) {
		resp.Body = &streamBody{ReadCloser: resp.Body}
	}
	return resp, nil
}

// streamBody is the body of a long-running response (a watch, a log
// stream) as client-go reads it: a stream cut short ends with
// io.ErrUnexpectedEOF itself. pooltrace annotates a body's read error with
// its connection, but client-go's watch decoder (apimachinery's
// watch.StreamWatcher) compares the error with io.EOF and
// io.ErrUnexpectedEOF by identity: on those it ends the watch quietly and
// the reflector watches again from the last resourceVersion it saw; on any
// other error it does not take for a lost connection it sends an error
// event, on which the reflector lists everything again.
type streamBody struct{ io.ReadCloser }

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// Only pooltrace's annotation of the bare error: a timeout's error
	// around it says more, and client-go takes a timeout for a lost
	// connection already.
	if pe := (*pooltrace.Error)(nil); errors.As(err, &pe) && pe.Err == io.ErrUnexpectedEOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// clientGoError returns the error to hand client-go for err, the stack's
// (see [Error]). A call middleware (stack.WithCallMiddleware) may have
// wrapped the retry error, and client-go searches the whole chain; it may
// also have formatted or replaced it, so that the chain no longer holds
// it: gaveUp, what [recordGiveUp] saw below the call middleware, then
// says the stack gave up.
func clientGoError(err error, gaveUp *retry.Error) error {
	if re := givenUp(err); re != nil {
		return &Error{Retry: re, err: err}
	}
	if gaveUp != nil {
		return &Error{Retry: gaveUp, err: err}
	}
	return err
}

// givenUp returns the retry error in err's chain when the stack retried the
// request and gave up, or did not retry it because the budget refused, or
// nil: a request that failed on its only attempt for another reason is
// client-go's to retry.
func givenUp(err error) *retry.Error {
	var re *retry.Error
	if errors.As(err, &re) && (re.Attempts > 1 || re.Reason == retry.ReasonBudget) {
		return re
	}
	return nil
}

// recordGiveUp is the innermost call middleware, right above the retry
// layer: it stores the retry error of a request the stack gave up on in
// the request's acting context, before any call middleware above can
// format it into text that client-go would take for a lost connection.
// A call middleware may call the stack more than once for one request (a
// retry or a failover of its own): what counts is the last call to end,
// so every call stores its outcome, nil when the stack did not give up on
// it. A side call of the middleware's own through the stack with the
// request's context (a lookup before the call) counts too, as does the
// last of calls it made at once: a middleware that hands back another
// call's error than the last to end should wrap it, so that client-go
// finds the retry error in the chain.
func recordGiveUp(next http.RoundTripper) http.RoundTripper {
	return &giveUpRecorder{wrap(next)}
}

type giveUpRecorder struct{ wrapped }

func (g *giveUpRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if a := actingFor(req.Context()); a != nil {
		var re *retry.Error
		if err != nil {
			re = givenUp(err) // not on success: errors.As allocates
		}
		a.gaveUp.Store(re)
	}
	return resp, err
}

// failing reports a configuration error for every request, without sending
// it.
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
