package reconciler

import (
	"time"

	"golang.org/x/time/rate"
)

// DefaultWorkers is the default of WithWorkers.
const DefaultWorkers = defaultWorkers

// NextWait exposes the reconciler's jittered wait to the tests.
func NextWait(r *Reconciler) time.Duration { return r.next() }

// WriteLimit returns the reconciler's write limit and burst; 0, 0 for
// none.
func WriteLimit(r *Reconciler) (rate.Limit, int) {
	if r.limiter == nil {
		return 0, 0
	}
	return r.limiter.Limit(), r.limiter.Burst()
}

// SetClusterScope makes Run watch the whole cluster, or each namespace,
// whatever the namespaces' count and the API server's answers.
func SetClusterScope(r *Reconciler, cluster bool) { r.cluster = &cluster }
