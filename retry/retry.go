package retry

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// Defaults.
const (
	// DefaultMaxAttempts is the default number of attempts, the first
	// included.
	DefaultMaxAttempts = 3
	// DefaultBackoffBase and DefaultBackoffMax bound the default full-jitter
	// backoff: the wait before retry n is uniform in [0, min(max, base*2^(n-1))).
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
	// DefaultBudgetRatio and DefaultBudgetFloor are the default retry
	// budget: retries up to 20% of requests, plus 10 retries per second.
	DefaultBudgetRatio = 0.2
	DefaultBudgetFloor = 10.0
)

// Backoff returns the wait before retry n (1 for the first retry).
type Backoff func(retry int) time.Duration

// FullJitter returns exponential backoff with full jitter: the wait before
// retry n is uniform in [0, min(max, base*2^(n-1))).
func FullJitter(base, max time.Duration) Backoff {
	return func(n int) time.Duration {
		ceil := max
		if n < 63 {
			if d := base << (n - 1); d > 0 && d < max {
				ceil = d
			}
		}
		if ceil <= 0 {
			return 0
		}
		return rand.N(ceil)
	}
}

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxAttempts int
	backoff     Backoff
	classify    func(error) Class
	exempt      func(*http.Request) bool
	budget      *budget
	status      bool
	logger      logr.Logger
	verbosity   int
	observer    func(Decision)
	err         error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("retry: "+format, args...)
	}
}

// WithMaxAttempts sets the number of attempts, the first included; 1
// disables retries. Default: [DefaultMaxAttempts]. Must be at least 1.
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) {
		c.maxAttempts = n
		if n < 1 {
			c.fail("WithMaxAttempts must be at least 1, got %d", n)
		}
	})
}

// WithBackoff sets the wait between attempts. Default:
// FullJitter([DefaultBackoffBase], [DefaultBackoffMax]). Must not be nil.
func WithBackoff(b Backoff) Option {
	return optionFunc(func(c *config) {
		c.backoff = b
		if b == nil {
			c.fail("WithBackoff must not be nil")
		}
	})
}

// WithClassifier replaces [Classify]. Must not be nil.
func WithClassifier(f func(error) Class) Option {
	return optionFunc(func(c *config) {
		c.classify = f
		if f == nil {
			c.fail("WithClassifier must not be nil")
		}
	})
}

// WithExempt sets which requests pass through without retries, in addition
// to upgrade requests, which always do. kubeadapter exempts long-running
// requests (timeout.LongRunning). Default: none.
func WithExempt(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.exempt = f })
}

// WithBudget sets the retry budget shared by all requests through this
// middleware: every request adds ratio tokens, the floor adds floorPerSecond
// tokens each second, and every retry takes one, except that the requests
// failed by one lost connection share a token and a request that never
// reached a server takes none (see the package documentation). A server
// that fails request after request then sees at most about (1+ratio) times
// the requests, plus the floor. Default:
// [DefaultBudgetRatio], [DefaultBudgetFloor]. ratio must be in [0, 1] and
// floorPerSecond not negative.
func WithBudget(ratio, floorPerSecond float64) Option {
	return optionFunc(func(c *config) {
		switch {
		case !(ratio >= 0 && ratio <= 1):
			c.fail("WithBudget ratio must be between 0 and 1, got %v", ratio)
		case !(floorPerSecond >= 0):
			c.fail("WithBudget floorPerSecond must not be negative, got %v", floorPerSecond)
		default:
			c.budget = newBudget(ratio, floorPerSecond)
		}
	})
}

// WithoutBudget removes the retry budget. Default: a budget is on.
func WithoutBudget() Option {
	return optionFunc(func(c *config) { c.budget = nil })
}

// WithStatusRetry also retries HTTP responses 429, 502, 503 and 504,
// honouring Retry-After in seconds or as an HTTP date, never waiting past the
// context deadline. 429 is retried for any method (the server refused it);
// 502, 503 and 504 only for idempotent requests. Leave it off under
// client-go, which does this itself. Default: off.
func WithStatusRetry() Option {
	return optionFunc(func(c *config) { c.status = true })
}

// WithLogger sets the logger for retries when the request's context carries
// none. Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithVerbosity sets the logr verbosity of the line logged for each retry.
// Default: 0.
func WithVerbosity(v int) Option {
	return optionFunc(func(c *config) { c.verbosity = max(v, 0) })
}

// WithObserver calls f for every decision the middleware makes after a
// failed attempt: each retry, and the end of retrying with its [Reason].
// A request that succeeds on its first attempt calls nothing. f runs on the
// request's goroutine and must not block. Observers add up: each one given
// is called, in order. Must not be nil. Default: none.
func WithObserver(f func(Decision)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithObserver must not be nil")
			return
		}
		if prev := c.observer; prev != nil {
			c.observer = func(d Decision) { prev(d); f(d) }
			return
		}
		c.observer = f
	})
}

func newConfig(opts []Option) config {
	c := config{
		maxAttempts: DefaultMaxAttempts,
		backoff:     FullJitter(DefaultBackoffBase, DefaultBackoffMax),
		classify:    Classify,
		budget:      newBudget(DefaultBudgetRatio, DefaultBudgetFloor),
		logger:      logr.Discard(),
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Check reports the error that New(opts...) would return from every
// request, or nil if the options are valid.
func Check(opts ...Option) error {
	c := newConfig(opts)
	return c.err
}

// New returns a middleware that retries transport errors when that is safe
// (see the package documentation). Each middleware has its own retry budget,
// shared by every RoundTripper it wraps. The RoundTrippers are safe for
// concurrent use.
//
// Invalid options do not panic: every request fails with an error naming the
// option, without being sent.
func New(opts ...Option) transport.Middleware {
	c := newConfig(opts)
	return func(next http.RoundTripper) http.RoundTripper {
		return &roundTripper{Wrapped: roundtrip.Wrapped{Next: next}, cfg: c}
	}
}

type idempotentKey struct{}

// ContextWithIdempotent marks requests made with the returned context as
// idempotent: re-sending them is harmless, so a failure that may have
// reached the server is retried even for POST or PATCH.
func ContextWithIdempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, idempotentKey{}, true)
}

// IsIdempotent reports whether req may be re-sent after it may have reached
// the server: by its method, by an Idempotency-Key or X-Idempotency-Key
// header (present, as net/http counts it), or by [ContextWithIdempotent].
func IsIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	if _, ok := req.Header["X-Idempotency-Key"]; ok {
		return true
	}
	marked, _ := req.Context().Value(idempotentKey{}).(bool)
	return marked
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
	if roundtrip.IsUpgrade(req) || (rt.cfg.exempt != nil && rt.cfg.exempt(req)) {
		return rt.Next.RoundTrip(req)
	}
	var conn *connTrace
	if rt.cfg.budget != nil {
		rt.cfg.budget.deposit()
		conn = &connTrace{}
		conn.trace.GotConn = conn.gotConn
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &conn.trace))
	}
	resp, err := rt.Next.RoundTrip(req)
	if err == nil && !rt.retryStatus(req, resp) {
		return resp, nil
	}
	return rt.retry(req, conn, resp, err)
}

// connTrace learns which connection carried an attempt, so that the
// requests that failed with the same connection can share one retry token.
// net/http calls GotConn for every connection it hands the request,
// composed with any other trace in the context (client-go's, pooltrace's);
// the last one is the connection the attempt failed on. Dials that fail
// never report a connection.
type connTrace struct {
	trace httptrace.ClientTrace
	mu    sync.Mutex
	conn  net.Conn
}

func (c *connTrace) gotConn(info httptrace.GotConnInfo) {
	c.mu.Lock()
	c.conn = info.Conn
	c.mu.Unlock()
}

// take returns the connection of the attempt that just ended, if there was
// one, and forgets it for the next attempt.
func (c *connTrace) take() net.Conn {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	conn := c.conn
	c.conn = nil
	return conn
}

// retryStatus reports whether resp is a status WithStatusRetry retries.
func (rt *roundTripper) retryStatus(req *http.Request, resp *http.Response) bool {
	if !rt.cfg.status {
		return false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return true
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return IsIdempotent(req)
	}
	return false
}

// retry takes over after the first attempt failed with err, or answered
// with a status to retry in resp. It is the slow path: the state it keeps is
// per request. conn is nil when there is no budget.
func (rt *roundTripper) retry(req *http.Request, conn *connTrace, resp *http.Response, err error) (*http.Response, error) {
	ctx := req.Context()
	e := &Error{Method: req.Method}
	rewindable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	shared := false // whether a retry of this request already shared a token
	for attempt := 1; ; attempt++ {
		e.Attempts = attempt
		d := Decision{Request: req, Attempt: attempt, Err: err}
		failedOn := conn.take()
		if err != nil {
			e.Causes = append(e.Causes, err)
			class := rt.cfg.classify(err)
			e.Class, d.Class = class, class
			switch {
			case ctx.Err() != nil:
				return nil, rt.stop(e, d, ctxReason(ctx))
			case class == NotRetryable:
				return nil, rt.stop(e, d, ReasonNotRetryable)
			case class == MaybeSent && !IsIdempotent(req):
				return nil, rt.stop(e, d, ReasonNotIdempotent)
			case !rewindable:
				return nil, rt.stop(e, d, ReasonBodyNotRewindable)
			case attempt >= rt.cfg.maxAttempts:
				return nil, rt.stop(e, d, ReasonAttempts)
			}
			d.Wait = rt.cfg.backoff(attempt)
			if !rt.fits(ctx, d.Wait) {
				return nil, rt.stop(e, d, ReasonDeadline)
			}
			if !rt.admit(err, class, failedOn, &shared) {
				return nil, rt.stop(e, d, ReasonBudget)
			}
		} else {
			// A status to retry: give the response back unless another
			// attempt is possible.
			d.StatusCode = resp.StatusCode
			d.Wait = rt.cfg.backoff(attempt)
			if ra, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				d.Wait = ra
			}
			switch {
			case !rewindable:
				return rt.giveBack(resp, d, ReasonBodyNotRewindable)
			case attempt >= rt.cfg.maxAttempts:
				return rt.giveBack(resp, d, ReasonAttempts)
			case !rt.fits(ctx, d.Wait):
				return rt.giveBack(resp, d, ReasonDeadline)
			case !rt.withdraw():
				return rt.giveBack(resp, d, ReasonBudget)
			}
			drain(resp)
		}
		rt.log(req, attempt, err, e.Class, resp, d.Wait)
		if d.Wait > 0 {
			t := time.NewTimer(d.Wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				e.Causes = append(e.Causes, context.Cause(ctx))
				return nil, rt.stop(e, d, ctxReason(ctx))
			}
		}
		next := req
		if req.Body != nil && req.Body != http.NoBody {
			body, berr := req.GetBody()
			if berr != nil {
				e.Causes = append(e.Causes, fmt.Errorf("rewinding the request body: %w", berr))
				return nil, rt.stop(e, d, ReasonBodyNotRewindable)
			}
			r := *req
			r.Body = body
			next = &r
		}
		if rt.cfg.observer != nil {
			d.Retry = true
			rt.cfg.observer(d)
		}
		resp, err = rt.Next.RoundTrip(next)
		if err == nil && !rt.retryStatus(req, resp) {
			return resp, nil
		}
	}
}

// ctxReason is the reason to stop when ctx is done.
func ctxReason(ctx context.Context) Reason {
	if ctx.Err() == context.DeadlineExceeded {
		return ReasonDeadline
	}
	return ReasonCanceled
}

// stop ends retrying for reason: it records the reason in e, tells the
// observer and returns e.
func (rt *roundTripper) stop(e *Error, d Decision, reason Reason) *Error {
	e.Reason = reason
	if rt.cfg.observer != nil {
		d.Reason, d.Wait = reason, 0
		rt.cfg.observer(d)
	}
	return e
}

// giveBack ends retrying a status for reason: the caller gets the response.
func (rt *roundTripper) giveBack(resp *http.Response, d Decision, reason Reason) (*http.Response, error) {
	if rt.cfg.observer != nil {
		d.Reason, d.Wait = reason, 0
		rt.cfg.observer(d)
	}
	return resp, nil
}

// fits reports whether a wait of d ends before the context's deadline.
func (rt *roundTripper) fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

func (rt *roundTripper) withdraw() bool {
	return rt.cfg.budget == nil || rt.cfg.budget.withdraw()
}

// admit asks the budget for a retry after err (see the package
// documentation, The retry budget): free if the request never reached a
// server, one token shared with the connection's other requests if the
// connection was lost under it (once per request: its later retries pay
// their own), else one token.
func (rt *roundTripper) admit(err error, class Class, failedOn net.Conn, shared *bool) bool {
	if rt.cfg.budget == nil {
		return true
	}
	switch c := budgetCause(err); {
	case c == causeNoLoad && class == NotSent:
		return true
	case c == causeConnection && failedOn != nil && !*shared:
		*shared = true
		return rt.cfg.budget.withdrawShared(keyOf(failedOn))
	}
	return rt.cfg.budget.withdraw()
}

func (rt *roundTripper) log(req *http.Request, attempt int, err error, class Class, resp *http.Response, wait time.Duration) {
	log, lerr := logr.FromContext(req.Context())
	if lerr != nil {
		log = rt.cfg.logger
	}
	v := log.V(rt.cfg.verbosity)
	if !v.Enabled() {
		return
	}
	path := ""
	if req.URL != nil {
		path = req.URL.Path
	}
	kv := []any{"method", req.Method, "host", req.Host, "path", path, "attempt", attempt, "wait", wait}
	if err != nil {
		kv = append(kv, "class", class.String(), "err", err)
	} else {
		kv = append(kv, "status", resp.StatusCode)
	}
	v.Info("retrying request", kv...)
}

// drain reads a little of a discarded response body, so that its connection
// can be reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}
