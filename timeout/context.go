package timeout

import (
	"context"
	"time"
)

// The per-call budget a context carries for [ContextWithBudget] and
// [ContextWithoutBudget].
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
