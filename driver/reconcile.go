package driver

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/retry"
)

// Reconciler defaults.
const (
	// DefaultPeriod is the resync period: the safety net that re-checks
	// every cached sandbox. Events drive the reconciler; the resync reads
	// the cache, not the API server.
	DefaultPeriod = 10 * time.Minute
	// DefaultJitter spreads resyncs over period*(1±DefaultJitter).
	DefaultJitter         = 0.2
	DefaultBootstrapGrace = 5 * time.Minute
	// DefaultWorkers bounds the writes in flight.
	DefaultWorkers = 8
	// DefaultWriteQPS and DefaultWriteBurst bound the rate of writes: a
	// fence change over 50,000 sandboxes becomes a steady stream of
	// suspensions, not 50,000 concurrent PATCHes.
	DefaultWriteQPS   = 50
	DefaultWriteBurst = 100
)

// PassStats counts what one pass saw and did.
type PassStats struct {
	Seen     int
	Actions  int
	Warnings int
	Errors   int
	Duration time.Duration
}

// Reconciler converges the driver's sandboxes with their namespaces'
// fences. Construct it with [NewReconciler]. [Reconciler.Run] is the
// event-driven loop; [Reconciler.Pass] is one full sweep. It is safe for
// concurrent use.
type Reconciler struct {
	driver   *Driver
	period   time.Duration
	jitter   float64
	grace    time.Duration
	workers  int
	limiter  *rate.Limiter
	election *LeaderElection
	observer func(PassStats)
	log      logr.Logger

	mu sync.Mutex
	// running is the synced cache of Run, nil when Run is not running.
	running *caches
	// leading is set while Run's workers run.
	leading bool
	// written records, per sandbox, the resourceVersion a write was based
	// on, until the cache shows a newer one: a cache that has not caught
	// up with our own write is not decided from again.
	written map[types.NamespacedName]string
}

// ReconcilerOption configures [NewReconciler].
type ReconcilerOption func(*Reconciler)

// WithPeriod sets the resync period. Default: [DefaultPeriod].
// Values below a second are raised to a second.
func WithPeriod(d time.Duration) ReconcilerOption {
	return func(r *Reconciler) { r.period = max(d, time.Second) }
}

// WithJitter sets the relative jitter of the period, between 0.1 and 0.5.
// Default: [DefaultJitter].
func WithJitter(f float64) ReconcilerOption {
	return func(r *Reconciler) { r.jitter = min(max(f, 0.1), 0.5) }
}

// WithBootstrapGrace sets how long a create or start may take before a
// failure or a stuck start reported by the controller rolls it back.
// Default: [DefaultBootstrapGrace].
func WithBootstrapGrace(d time.Duration) ReconcilerOption {
	return func(r *Reconciler) { r.grace = d }
}

// WithWorkers sets how many sandboxes Run acts on at once, which bounds
// the writes in flight. Default: [DefaultWorkers]. Values below 1 are
// raised to 1.
func WithWorkers(n int) ReconcilerOption {
	return func(r *Reconciler) { r.workers = max(n, 1) }
}

// WithWriteLimit bounds the rate of the reconciler's writes to qps per
// second with bursts of burst. Default: [DefaultWriteQPS],
// [DefaultWriteBurst]. A qps of rate.Inf removes the bound.
func WithWriteLimit(qps float64, burst int) ReconcilerOption {
	return func(r *Reconciler) { r.limiter = rate.NewLimiter(rate.Limit(qps), max(burst, 1)) }
}

// WithObserver calls f with the counts of every pass. Default: none.
func WithObserver(f func(PassStats)) ReconcilerOption {
	return func(r *Reconciler) { r.observer = f }
}

// WithReconcilerLogger sets the reconciler's logger. Default: the driver's.
func WithReconcilerLogger(l logr.Logger) ReconcilerOption {
	return func(r *Reconciler) { r.log = l }
}

// NewReconciler returns a reconciler for d's sandboxes.
func NewReconciler(d *Driver, opts ...ReconcilerOption) *Reconciler {
	r := &Reconciler{
		driver: d, period: DefaultPeriod, jitter: DefaultJitter, grace: DefaultBootstrapGrace,
		workers: DefaultWorkers, limiter: rate.NewLimiter(DefaultWriteQPS, DefaultWriteBurst),
		log: d.opts.logger, written: map[types.NamespacedName]string{},
	}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return r
}

// next returns the jittered wait before the next resync.
func (r *Reconciler) next() time.Duration {
	f := 1 + r.jitter*(2*rand.Float64()-1)
	return time.Duration(float64(r.period) * f)
}

// Pass runs one full sweep: for each namespace it reads the fence and the
// sandboxes, decides for each sandbox with [Decide] and carries the
// actions out. While [Reconciler.Run] runs and its caches have synced, Pass
// reads them (and, under leader election, fails on a replica that does not
// lead); otherwise it reads the fence and lists the sandboxes from the API
// server (paginated). A namespace whose fence or sandboxes cannot
// be read is skipped: nothing is decided from unknown state. The error
// joins every failure of the pass; the stats count them.
func (r *Reconciler) Pass(ctx context.Context) (PassStats, error) {
	start := time.Now()
	var stats PassStats
	var errs []error
	d := r.driver
	r.mu.Lock()
	c, follower := r.running, r.election != nil && r.running != nil && !r.leading
	r.mu.Unlock()
	if follower {
		return stats, errFollower
	}
	for _, ns := range d.namespaces {
		live, sandboxes, err := r.read(ctx, c, ns)
		if err != nil {
			stats.Errors++
			errs = append(errs, err)
			continue
		}
		now := d.opts.now()
		for i := range sandboxes {
			stats.Seen++
			a, err := r.reconcile(ctx, &sandboxes[i], live, now)
			if err != nil {
				stats.Errors++
				errs = append(errs, err)
				continue
			}
			if a.Type != ActionNone {
				stats.Actions++
				if a.Warn {
					stats.Warnings++
				}
			}
		}
	}
	stats.Duration = time.Since(start)
	if r.observer != nil {
		r.observer(stats)
	}
	r.log.V(1).Info("reconcile pass", "seen", stats.Seen, "actions", stats.Actions, "warnings", stats.Warnings, "errors", stats.Errors, "duration", stats.Duration)
	return stats, errors.Join(errs...)
}

// errFollower is the error of a Pass on a replica that does not hold the
// lease: only the leader writes.
var errFollower = errors.New("driver: reconcile pass: this replica does not hold the lease; only the leader acts")

// read returns ns's live fence and sandboxes, from c if it is not nil,
// else from the API server.
func (r *Reconciler) read(ctx context.Context, c *caches, ns string) (LiveFence, []Sandbox, error) {
	d := r.driver
	if c != nil {
		live, err := c.fence(ns)
		if err != nil {
			return LiveFence{}, nil, wrap("reconcile", ns, "", err)
		}
		return live, c.list(ns), nil
	}
	live, err := d.readFence(ctx, ns)
	if err != nil {
		return LiveFence{}, nil, wrap("reconcile", ns, "", err)
	}
	sandboxes, err := d.list(ctx, ns)
	return live, sandboxes, err
}

// reconcile decides for s and carries the action out. It returns the
// action taken: ActionNone when there was nothing to do, or when the
// sandbox converged meanwhile.
func (r *Reconciler) reconcile(ctx context.Context, s *Sandbox, live LiveFence, now time.Time) (Action, error) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	r.mu.Lock()
	rv, wrote := r.written[key]
	if wrote && rv != s.ResourceVersion {
		delete(r.written, key)
		wrote = false
	}
	r.mu.Unlock()
	if wrote {
		// The cache has not caught up with our own write; its event
		// brings the sandbox back.
		return Action{}, nil
	}
	a := Decide(*s, live, now, r.grace)
	if a.Type == ActionSuspend && (!live.Present || live.Fence.UID != s.Fence.UID) {
		// A cache whose fence watch was re-established has not yet seen
		// what happened meanwhile: it can say absent, or an old uid, for a
		// fence created or re-created since. Before suspending on that,
		// the API server's word.
		fresh, err := r.driver.readFence(ctx, s.Namespace)
		if err != nil {
			return Action{}, wrap("reconcile", s.Namespace, s.Name, err)
		}
		live = fresh
		a = Decide(*s, live, now, r.grace)
	}
	if a.Type == ActionNone {
		return a, nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return Action{}, wrap("reconcile", s.Namespace, s.Name, err)
	}
	done, err := r.act(ctx, s, live, now, a)
	if err != nil || !done {
		return Action{}, err
	}
	r.mu.Lock()
	r.written[key] = s.ResourceVersion
	r.mu.Unlock()
	return a, nil
}

// act carries out a on s. It patches from the state it was given; on
// conflict the object is read again and the decision made again, so a
// sandbox that converged meanwhile is left alone. It reports whether a
// patch was sent.
func (r *Reconciler) act(ctx context.Context, s *Sandbox, live LiveFence, now time.Time, a Action) (bool, error) {
	d := r.driver
	// The patches below are guarded by resourceVersion: a re-sent copy
	// fails with 409 and is decided again, so they are safe to retry.
	ctx = retry.WithIdempotent(ctx)
	var patched bool
	out, err := d.update(ctx, "reconcile", s.Namespace, s.Name, s, func(cur Sandbox) *patch {
		patched = false
		if Decide(cur, live, now, r.grace).Type != a.Type {
			return nil
		}
		switch a.Type {
		case ActionSuspend, ActionRollback:
			patched = true
			return suspendPatch(cur.Version)
		case ActionClearBootstrap:
			patched = true
			return clearBootstrapPatch()
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	if patched && a.Warn {
		r.log.Info("warning: "+a.Message, "namespace", s.Namespace, "sandbox", s.Name, "action", a.Type.String(),
			"recordedFenceUID", s.Fence.UID, "recordedFenceGeneration", s.Fence.Generation,
			"liveFenceUID", live.Fence.UID, "liveFenceGeneration", live.Fence.Generation)
		d.events.warn(out, a.Reason, actionVerb(a.Type), a.Message)
	}
	return patched, nil
}

// actionVerb is the action of an Event, what the driver did.
func actionVerb(t ActionType) string {
	switch t {
	case ActionSuspend, ActionRollback:
		return "Suspend"
	case ActionClearBootstrap:
		return "ClearBootstrap"
	}
	return "None"
}
