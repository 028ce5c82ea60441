package reconciler

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
)

// NextWait exposes the reconciler's jittered wait to the tests.
func NextWait(r *Reconciler) time.Duration { return wait.Jitter(r.resyncWait()) }

// WriteLimit returns the reconciler's write limit and burst; 0, 0 for
// none.
func WriteLimit(r *Reconciler) (rate.Limit, int) {
	if r.limiter == nil {
		return 0, 0
	}
	return r.limiter.Limit(), r.limiter.Burst()
}
