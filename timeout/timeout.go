package timeout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	budget      time.Duration
	longRunning func(*http.Request) bool
	stall       time.Duration
	observer    func(Exceeded)
	err         error
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
		if d <= 0 && c.err == nil {
			c.err = fmt.Errorf("timeout: WithStallTimeout must be positive, got %v", d)
		}
	})
}

// Exceeded describes a request whose budget, or stall timeout, ran out.
type Exceeded struct {
	// Request is the request as the middleware received it. Observers must
	// not modify it or read its body.
	Request *http.Request
	// Phase says where the request was.
	Phase Phase
	// Limit is the budget, or the stall timeout for PhaseStalled.
	Limit time.Duration
	// Elapsed is the time since RoundTrip was called.
	Elapsed time.Duration
}

// WithObserver calls f when a request's budget or stall timeout runs out,
// from the timer's goroutine, before the request is cancelled. f must not
// block. Observers add up: each one given is called, in order. Must not be
// nil. Default: none.
func WithObserver(f func(Exceeded)) Option {
	return optionFunc(func(c *config) {
		switch prev := c.observer; {
		case f == nil:
			if c.err == nil {
				c.err = errors.New("timeout: WithObserver must not be nil")
			}
		case prev != nil:
			c.observer = func(e Exceeded) { prev(e); f(e) }
		default:
			c.observer = f
		}
	})
}

func newConfig(budget time.Duration, opts []Option) config {
	c := config{budget: budget, longRunning: LongRunning}
	if budget <= 0 {
		c.err = fmt.Errorf("timeout: budget of timeout.New must be positive, got %v", budget)
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Check reports the error that New(budget, opts...) would return from every
// request, or nil if the configuration is valid.
func Check(budget time.Duration, opts ...Option) error {
	c := newConfig(budget, opts)
	return c.err
}

// New returns a middleware that gives every request its own deadline of
// budget, starting when RoundTrip is called and ending when the response
// body is closed or read to EOF (see the package documentation). The
// RoundTrippers it returns are safe for concurrent use.
//
// An invalid budget (zero or negative) or option does not panic: every
// request fails with an error naming it, without being sent.
func New(budget time.Duration, opts ...Option) transport.Middleware {
	c := newConfig(budget, opts)
	return func(next http.RoundTripper) http.RoundTripper {
		return &roundTripper{Wrapped: roundtrip.Wrapped{Next: next}, cfg: c}
	}
}

type budgetKey struct{}

type budgetValue struct {
	d    time.Duration
	none bool
}

// ContextWithBudget returns a context under which requests get budget d instead of
// the middleware's own. A d that is not positive makes the request fail with
// an error naming it, without being sent.
func ContextWithBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, budgetKey{}, &budgetValue{d: d})
}

// ContextWithoutBudget returns a context under which requests get no deadline from
// this middleware; the context's own deadline, if any, still applies.
func ContextWithoutBudget(ctx context.Context) context.Context {
	return context.WithValue(ctx, budgetKey{}, &budgetValue{none: true})
}

type roundTripper struct {
	roundtrip.Wrapped
	cfg config
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.cfg.err != nil {
		roundtrip.CloseRequestBody(req)
		return nil, rt.cfg.err
	}
	ctx := req.Context()
	budget := rt.cfg.budget
	if v, ok := ctx.Value(budgetKey{}).(*budgetValue); ok {
		switch {
		case v.none:
			return rt.Next.RoundTrip(req)
		case v.d <= 0:
			roundtrip.CloseRequestBody(req)
			return nil, fmt.Errorf("timeout: budget of timeout.ContextWithBudget must be positive, got %v", v.d)
		}
		budget = v.d
	}
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(start) <= budget {
		// The caller's deadline comes first and bounds everything.
		return rt.Next.RoundTrip(req)
	}
	c := &call{start: start, budget: budget, phase: PhaseHeaders}
	if rt.cfg.observer != nil {
		c.req, c.observer = req, rt.cfg.observer
	}
	if rt.cfg.longRunning != nil && rt.cfg.longRunning(req) {
		c.longRunning = true
		c.stall = rt.cfg.stall
	}
	ctx, c.cancel = context.WithCancelCause(ctx)
	c.mu.Lock()
	c.timer = time.AfterFunc(budget, c.fire)
	c.mu.Unlock()

	resp, err := rt.Next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		terr := c.cause(err)
		c.finish()
		return nil, terr
	}
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		c.stop()
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
			resp.Body = &upgradeBody{ReadWriteCloser: rwc, c: c}
		} else {
			c.body = resp.Body
			resp.Body = c
		}
	case resp.Body == nil || resp.Body == http.NoBody:
		c.finish()
	default:
		if c.longRunning {
			c.streaming()
		} else {
			c.setPhase(PhaseBody)
		}
		c.body = resp.Body
		resp.Body = c
	}
	return resp, nil
}

// call is the deadline state of one request. It doubles as the response
// body wrapper, saving an allocation per request.
type call struct {
	body        io.ReadCloser
	start       time.Time
	budget      time.Duration
	longRunning bool
	stall       time.Duration
	cancel      context.CancelCauseFunc
	progress    atomic.Int64   // nanoseconds since start of the last body progress
	req         *http.Request  // for the observer only
	observer    func(Exceeded) // nil when there is none

	mu    sync.Mutex
	timer *time.Timer
	phase Phase
	done  bool
	err   *Error
}

func (c *call) fire() {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	elapsed := time.Since(c.start)
	limit := c.budget
	if c.phase == PhaseStalled {
		limit = c.stall
		if quiet := elapsed - time.Duration(c.progress.Load()); quiet < c.stall {
			c.timer.Reset(c.stall - quiet)
			c.mu.Unlock()
			return
		}
	}
	c.err = &Error{Budget: limit, Elapsed: elapsed, Phase: c.phase}
	c.done = true
	err := c.err
	c.mu.Unlock()
	if c.observer != nil {
		c.observer(Exceeded{Request: c.req, Phase: err.Phase, Limit: limit, Elapsed: elapsed})
	}
	c.cancel(err)
}

func (c *call) setPhase(p Phase) {
	c.mu.Lock()
	if !c.done {
		c.phase = p
	}
	c.mu.Unlock()
}

// streaming moves a long-running request past its headers: the budget no
// longer applies, the stall watchdog does if it is on.
func (c *call) streaming() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if c.stall <= 0 {
		c.timer.Stop()
		c.phase = PhaseBody
		return
	}
	c.phase = PhaseStalled
	c.progress.Store(int64(time.Since(c.start)))
	c.timer.Reset(c.stall)
}

// stop ends the deadline but keeps the context alive; used for upgrades,
// whose connection belongs to the caller until the body is closed.
func (c *call) stop() {
	c.mu.Lock()
	if !c.done {
		c.done = true
		c.timer.Stop()
	}
	c.mu.Unlock()
}

// finish ends the deadline and releases the request's context.
func (c *call) finish() {
	c.stop()
	c.cancel(errRequestDone)
}

var errRequestDone = errors.New("timeout: request done")

// cause returns the error to report for err: an *Error if the budget ran
// out, err itself otherwise.
func (c *call) cause(err error) error {
	c.mu.Lock()
	te := c.err
	c.mu.Unlock()
	if te == nil {
		return err
	}
	var got *Error
	if errors.As(err, &got) && got == te {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return te
	}
	e := *te
	e.Err = err
	return &e
}

// Read reads the response body; EOF ends the deadline.
func (c *call) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	if n > 0 && c.stall > 0 {
		c.progress.Store(int64(time.Since(c.start)))
	}
	if err != nil {
		if err == io.EOF {
			c.finish()
			return n, err
		}
		return n, c.cause(err)
	}
	return n, nil
}

// Close closes the response body and ends the deadline.
func (c *call) Close() error {
	err := c.body.Close()
	c.finish()
	return err
}

// upgradeBody keeps the io.ReadWriteCloser of a 101 response and releases
// the request's context when the caller closes the connection.
type upgradeBody struct {
	io.ReadWriteCloser
	c *call
}

func (b *upgradeBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.c.finish()
	return err
}

// CloseWrite forwards to the upgraded connection, as net/http's own 101 body
// does.
func (b *upgradeBody) CloseWrite() error {
	if cw, ok := b.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", http.ErrNotSupported)
}
