package reconciler

import (
	"time"

	"golang.org/x/time/rate"
)

// NextWait exposes the reconciler's jittered wait to the tests.
func NextWait(r *Reconciler) time.Duration { return r.next() }

// WriteLimit returns the reconciler's write limit and burst.
func WriteLimit(r *Reconciler) (rate.Limit, int) { return r.limiter.Limit(), r.limiter.Burst() }
