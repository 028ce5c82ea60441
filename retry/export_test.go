package retry

import (
	"net/http"

	"github.com/kubewire/kubewire/transport"
)

// NewCounted is [New], and a function that reports how many tokens the
// middleware's budget has given out.
func NewCounted(opts ...Option) (transport.Middleware, func() int) {
	c := newConfig(opts)
	mw := func(next http.RoundTripper) http.RoundTripper {
		return newRoundTripper(next, c)
	}
	return mw, func() int {
		if c.budget == nil {
			return 0
		}
		c.budget.mu.Lock()
		defer c.budget.mu.Unlock()
		return c.budget.withdrawn
	}
}

// BudgetCause reports what err costs the budget: "request", "connection"
// or "none".
func BudgetCause(err error) string {
	switch budgetCause(err) {
	case causeConnection:
		return "connection"
	case causeNoLoad:
		return "none"
	}
	return "request"
}

// ParseRetryAfter is parseRetryAfter, for its table test and fuzz target.
var ParseRetryAfter = parseRetryAfter
