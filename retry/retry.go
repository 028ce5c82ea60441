package retry

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/internal/hooks"
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
	// DefaultMaxRetryAfter is the longest Retry-After that
	// [WithStatusRetry] waits out by default.
	DefaultMaxRetryAfter = time.Minute
)

// Backoff returns the wait before retry n (1 for the first retry).
type Backoff func(retry int) time.Duration

// FullJitter returns exponential backoff with full jitter: the wait before
// retry n is uniform in [0, min(limit, base*2^(n-1))). An n below 1 waits
// as the first retry does.
func FullJitter(base, limit time.Duration) Backoff {
	return func(n int) time.Duration {
		n = max(n, 1)
		ceil := limit
		if n < 63 {
			if d := base << (n - 1); d > 0 && d < limit {
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
	maxWait     time.Duration
	logger      logr.Logger
	verbosity   int
	observer    func(Decision)
	resendable  func(*http.Request) bool
	err         error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = &transport.ConfigError{Err: fmt.Errorf("retry: "+format, args...)}
	}
}

// WithMaxAttempts sets the number of attempts, the first included; 1
// disables retries. A request that reached no server and whose context
// has a deadline is sent again past it while the deadline and the budget
// allow (see the package documentation). Default: [DefaultMaxAttempts].
// Must be at least 1.
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

// WithExempt adds requests that pass through without retries: those f
// reports true for. Upgrade requests always pass through. Exemptions add
// up: a request is exempt when any f given says so, so a caller's own
// cannot undo kubeadapter's exemption of long-running requests
// (timeout.LongRunning). A nil f adds none. Default: none.
func WithExempt(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			return
		}
		if prev := c.exempt; prev != nil {
			c.exempt = func(r *http.Request) bool { return prev(r) || f(r) }
			return
		}
		c.exempt = f
	})
}

// WithBudget sets the retry budget shared by all requests through this
// middleware: every request adds ratio tokens, the floor adds floorPerSecond
// tokens each second, and every retry takes one, except that the requests
// failed by one lost connection share a token and a request that never
// reached a server takes none (see the package documentation). A server
// that fails request after request then sees at most about (1+ratio) times
// the requests, plus the floor. Default:
// [DefaultBudgetRatio], [DefaultBudgetFloor]. ratio must be in [0, 1] and
// floorPerSecond finite and not negative.
func WithBudget(ratio, floorPerSecond float64) Option {
	return optionFunc(func(c *config) {
		switch {
		case !(ratio >= 0 && ratio <= 1):
			c.fail("WithBudget ratio must be between 0 and 1, got %v", ratio)
		case !(floorPerSecond >= 0) || math.IsInf(floorPerSecond, 1):
			c.fail("WithBudget floorPerSecond must be finite and not negative, got %v", floorPerSecond)
		default:
			c.budget = newBudget(ratio, floorPerSecond)
		}
	})
}

// WithoutBudget removes the retry budget. Without it nothing but the
// context's deadline bounds the retries of a request that reached no
// server (see [WithMaxAttempts]): a server down for long gets a dial from
// every such request at each backoff. Default: a budget is on.
func WithoutBudget() Option {
	return optionFunc(func(c *config) { c.budget = nil })
}

// WithStatusRetry also retries HTTP responses 429, 502, 503 and 504,
// honouring Retry-After in seconds or as an HTTP date, never waiting past the
// context deadline nor [WithMaxRetryAfter]. 429 is retried for any method
// (the server refused it); 502, 503 and 504 only for idempotent requests.
// Leave it off under client-go, which does this itself. Default: off.
func WithStatusRetry() Option {
	return optionFunc(func(c *config) { c.status = true })
}

// WithMaxRetryAfter sets the longest Retry-After that [WithStatusRetry]
// waits out. A status asking for a longer wait is not retried: it goes
// back to the caller, Retry-After header and all, with
// [ReasonRetryAfter], rather than hold the request for as long as the
// server says, up to a day, when the caller set no deadline. Default:
// [DefaultMaxRetryAfter]. Must be positive.
func WithMaxRetryAfter(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.maxWait = d
		if d <= 0 {
			c.fail("WithMaxRetryAfter must be positive, got %v", d)
		}
	})
}

// WithLogger sets the logger for retries when the request's context carries
// none. Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithVerbosity sets the logr verbosity of the line logged for each retry.
// Default: 0. Must not be negative.
func WithVerbosity(v int) Option {
	return optionFunc(func(c *config) {
		c.verbosity = v
		if v < 0 {
			c.fail("WithVerbosity must not be negative, got %d", v)
		}
	})
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
		c.observer = hooks.Then(c.observer, f)
	})
}

// WithResendable sets the rule that decides whether a request that may
// have reached the server (a [MaybeSent] failure, or under
// [WithStatusRetry] a 502, 503 or 504) may be sent again: f reports
// whether a second copy is harmless. Default: [IsIdempotent], RFC 9110's
// rule by method. Under Kubernetes a PUT or DELETE by name is not
// harmless to repeat (a second DELETE removes an object re-created under
// the name meanwhile); kubeadapter installs Kubernetes' rule, which
// re-sends a write only when its own precondition makes a second copy
// harmless. The rule holds for net/http's own re-sends too: a write that
// carries an Idempotency-Key or X-Idempotency-Key header, which net/http
// would re-send by itself, is not re-sent by it when f refuses it (the
// header then reaches the transport, and the server, under its lower-case
// name). New holds it for the headers a request carries when it reaches
// the retry layer; for those a middleware below sets (an attempt
// middleware, a wrapper between the retry layer and the base transport),
// [NoReplay] holds it, given the same options, right above the base
// transport; stack.New puts it there. f is called after such a failure,
// and before a write with one of those headers is sent, on the request's
// goroutine; it must not consume the request's body (it may
// read a copy from GetBody). Must not be nil.
func WithResendable(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithResendable must not be nil")
			return
		}
		c.resendable = f
	})
}

func newConfig(opts []Option) config {
	c := config{
		maxAttempts: DefaultMaxAttempts,
		backoff:     FullJitter(DefaultBackoffBase, DefaultBackoffMax),
		classify:    Classify,
		budget:      newBudget(DefaultBudgetRatio, DefaultBudgetFloor),
		maxWait:     DefaultMaxRetryAfter,
		logger:      logr.Discard(),
		resendable:  IsIdempotent,
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
	return func(next http.RoundTripper) http.RoundTripper { return newRoundTripper(next, c) }
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
// It is the default rule of [WithResendable].
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

type maybeAppliedKey struct{}

// MaybeApplied reports whether resp answers a write (not a GET, HEAD,
// OPTIONS or TRACE) the middleware sent again after an earlier copy may
// have reached the server, with 404 Not
// Found, 409 Conflict, 412 Precondition Failed or 422 Unprocessable
// Content: a write guarded by a precondition whose earlier copy was
// applied is refused so (a JSON patch whose test fails gets 422, RFC
// 5789). The caller should not take such an answer to mean its write did
// not happen.
func MaybeApplied(resp *http.Response) bool {
	if resp == nil || resp.Request == nil {
		return false
	}
	marked, _ := resp.Request.Context().Value(maybeAppliedKey{}).(bool)
	return marked
}
