package timeout

import (
	"context"
	"time"
)

// The per-call timeout a context carries for [ContextWithTimeout] and
// [ContextWithoutTimeout].
type timeoutKey struct{}

type timeoutValue struct {
	d    time.Duration
	none bool
}

// ContextWithTimeout returns a context under which each request gets the
// timeout d instead of the middleware's own. Unlike context.WithTimeout it
// sets no deadline on ctx: under retry every attempt gets d afresh. A d
// that is not positive makes the request fail with an error naming it,
// without being sent.
func ContextWithTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey{}, &timeoutValue{d: d})
}

// ContextWithoutTimeout returns a context under which requests get no
// deadline from this middleware; the context's own deadline, if any, still
// applies.
func ContextWithoutTimeout(ctx context.Context) context.Context {
	return context.WithValue(ctx, timeoutKey{}, &timeoutValue{none: true})
}
