package driver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/internal/hooks"
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

// ActionEvent reports one action the reconciler carried out, or one
// failure, in a [Reconciler.Pass] or in the event-driven work of
// [Reconciler.Run]. Actions it decided but did not need to send (the
// sandbox converged meanwhile) are not reported.
type ActionEvent struct {
	// Type is the action. With Err set it is the action that was decided,
	// or ActionNone when the failure came before a decision: a read of a
	// namespace's fence or sandboxes in a pass, or a sandbox whose fence is
	// unknown in Run.
	Type ActionType
	// Warn says the action was a transition worth a warning and an Event.
	Warn bool
	// Err is nil when the action was carried out. A pass reports every
	// error it counts in [PassStats.Errors]; Run reports every failure it
	// queues again with backoff.
	Err error
	// SinceFence is the time from the reconciler observing a fence change
	// (the event of the fence's informer that queued this sandbox) to the
	// suspension being written. It is zero when the action did not answer
	// a fence change: not a suspension, a pass outside Run, or no fence
	// event pending for the sandbox. A failed write keeps the fence change
	// pending, so the retry that succeeds is measured from it.
	SinceFence time.Duration
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
	actions  func(ActionEvent)
	log      logr.Logger

	mu sync.Mutex
	// running is the synced cache of Run, nil when Run is not running.
	running *caches
	// queue is the work queue of Run, set with running.
	queue *queue
	// leading is set while Run's workers run.
	leading bool
	// written records, per sandbox, the resourceVersion a write was based
	// on, until the cache shows a newer one: a cache that has not caught
	// up with our own write is not decided from again.
	written map[types.NamespacedName]string
}

// ReconcilerOption configures [NewReconciler].
type ReconcilerOption interface {
	apply(*reconcilerConfig) error
}

type reconcilerOptionFunc func(*reconcilerConfig) error

func (f reconcilerOptionFunc) apply(c *reconcilerConfig) error { return f(c) }

// reconcilerConfig is what the options set; [NewReconciler] builds the
// [Reconciler] from it once every option is valid.
type reconcilerConfig struct {
	period     time.Duration
	jitter     float64
	grace      time.Duration
	workers    int
	writeQPS   float64
	writeBurst int
	election   *LeaderElection
	observer   func(PassStats)
	actions    func(ActionEvent)
	log        logr.Logger
	hooks      []func(*Reconciler)
}

// WithPeriod sets the resync period. Default: [DefaultPeriod]. Must be at
// least 1s: the resync is a safety net over the cache, and a shorter
// period turns it into a busy loop.
func WithPeriod(d time.Duration) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if d < time.Second {
			return fmt.Errorf("driver: WithPeriod must be at least 1s, got %v", d)
		}
		c.period = d
		return nil
	})
}

// WithJitter sets the relative jitter of the period: each wait is drawn
// from period*(1±f). Default: [DefaultJitter]. Must be between 0.1 and
// 0.5: at least 0.1 so that the resync never beats in step with a timeout
// of the same length or with another replica's resync, at most 0.5 so that
// no wait is shorter than half the period.
func WithJitter(f float64) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if !(f >= 0.1 && f <= 0.5) {
			return fmt.Errorf("driver: WithJitter must be between 0.1 and 0.5, got %v", f)
		}
		c.jitter = f
		return nil
	})
}

// WithBootstrapGrace sets how long a create or start may take before a
// failure or a stuck start reported by the controller rolls it back.
// Default: [DefaultBootstrapGrace]. Must be positive: with no grace, a
// start that the scheduler reports Unschedulable for a moment (while a
// cluster autoscaler adds a node) would be rolled back at once.
func WithBootstrapGrace(d time.Duration) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if d <= 0 {
			return fmt.Errorf("driver: WithBootstrapGrace must be positive, got %v", d)
		}
		c.grace = d
		return nil
	})
}

// WithWorkers sets how many sandboxes Run acts on at once, which bounds
// the writes in flight. Default: [DefaultWorkers]. Must be at least 1.
func WithWorkers(n int) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if n < 1 {
			return fmt.Errorf("driver: WithWorkers must be at least 1, got %d", n)
		}
		c.workers = n
		return nil
	})
}

// WithWriteLimit bounds the rate of the reconciler's writes to qps per
// second with bursts of burst. Default: [DefaultWriteQPS],
// [DefaultWriteBurst]. A qps of rate.Inf (or +Inf) removes the bound.
// qps must be positive and burst at least 1: a limit of 0 lets the first
// burst through and then no write ever again, and a burst of 0 refuses
// every write.
func WithWriteLimit(qps float64, burst int) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		switch {
		case !(qps > 0):
			return fmt.Errorf("driver: WithWriteLimit qps must be positive, got %v", qps)
		case burst < 1:
			return fmt.Errorf("driver: WithWriteLimit burst must be at least 1, got %d", burst)
		}
		// rate.Limiter knows only rate.Inf as no limit; +Inf would
		// make NaN tokens.
		c.writeQPS, c.writeBurst = min(qps, float64(rate.Inf)), burst
		return nil
	})
}

// WithObserver calls f with the counts of every pass, Run's resyncs
// included, on the goroutine that ran the pass. Observers compose: each
// WithObserver adds one, called in the order of the options. Must not be
// nil. Default: none.
func WithObserver(f func(PassStats)) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if f == nil {
			return errors.New("driver: WithObserver must not be nil")
		}
		c.observer = hooks.Then(c.observer, f)
		return nil
	})
}

// WithActionObserver calls f with every [ActionEvent]: each action carried
// out and each failure, in passes and in Run's workers. f is called
// concurrently from the workers, which wait for it: it must be quick and
// safe for concurrent use. Observers compose: each WithActionObserver adds
// one, called in the order of the options. Without one, Run keeps no
// fence-change times. Must not be nil. Default: none.
func WithActionObserver(f func(ActionEvent)) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if f == nil {
			return errors.New("driver: WithActionObserver must not be nil")
		}
		c.actions = hooks.Then(c.actions, f)
		return nil
	})
}

// WithReconcilerLogger sets the reconciler's logger. Default: the driver's.
func WithReconcilerLogger(l logr.Logger) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		c.log = l
		return nil
	})
}

// WithReconcilerHook calls f with the reconciler that [NewReconciler]
// built, before NewReconciler returns it, and only if every option was
// valid. It is for a package that wires itself to a reconciler through an
// option and then reads the reconciler's state, as drivermetrics reads
// [Reconciler.QueueDepth]. f must not block. Hooks compose: each adds one,
// called in the order of the options. Must not be nil. Default: none.
func WithReconcilerHook(f func(*Reconciler)) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		if f == nil {
			return errors.New("driver: WithReconcilerHook must not be nil")
		}
		c.hooks = append(c.hooks, f)
		return nil
	})
}

// ReconcilerOptions bundles opts into one option, applied in order, for a
// package that offers one option made of several, such as drivermetrics.
// Nil options are skipped. Its error is the first of opts.
func ReconcilerOptions(opts ...ReconcilerOption) ReconcilerOption {
	return reconcilerOptionFunc(func(c *reconcilerConfig) error {
		for _, o := range opts {
			if o == nil {
				continue
			}
			if err := o.apply(c); err != nil {
				return err
			}
		}
		return nil
	})
}

// NewReconciler returns a reconciler for d's sandboxes. It starts nothing;
// [Reconciler.Run] does. The error names the first invalid option.
func NewReconciler(d *Driver, opts ...ReconcilerOption) (*Reconciler, error) {
	if d == nil {
		return nil, errors.New("driver: NewReconciler: nil *Driver")
	}
	c := reconcilerConfig{
		period: DefaultPeriod, jitter: DefaultJitter, grace: DefaultBootstrapGrace, workers: DefaultWorkers,
		writeQPS: DefaultWriteQPS, writeBurst: DefaultWriteBurst, log: d.opts.logger,
	}
	if err := ReconcilerOptions(opts...).apply(&c); err != nil {
		return nil, err
	}
	r := &Reconciler{
		driver: d, period: c.period, jitter: c.jitter, grace: c.grace, workers: c.workers,
		limiter: rate.NewLimiter(rate.Limit(c.writeQPS), c.writeBurst), election: c.election,
		observer: c.observer, actions: c.actions, log: c.log, written: map[types.NamespacedName]string{},
	}
	for _, f := range c.hooks {
		f(r)
	}
	return r, nil
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
	c, q, follower := r.running, r.queue, r.election != nil && r.running != nil && !r.leading
	r.mu.Unlock()
	if follower {
		return stats, errFollower
	}
	for _, ns := range d.namespaces {
		live, sandboxes, err := r.read(ctx, c, ns)
		if err != nil {
			stats.Errors++
			errs = append(errs, err)
			r.failed(ActionNone, err)
			continue
		}
		now := d.opts.now()
		for i := range sandboxes {
			stats.Seen++
			a, err := r.reconcile(ctx, q, &sandboxes[i], live, now)
			if err != nil {
				stats.Errors++
				errs = append(errs, err)
				r.failed(a.Type, err)
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
// sandbox converged meanwhile; with an error, the action decided. It
// reports the action carried out; the caller reports the error. q, when
// not nil, holds the sandbox's pending fence change, which a decision
// settles and a failure leaves pending.
func (r *Reconciler) reconcile(ctx context.Context, q *queue, s *Sandbox, live LiveFence, now time.Time) (Action, error) {
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
	live, a, err := r.decide(ctx, *s, live, now)
	if err != nil {
		return Action{}, err
	}
	if a.Type == ActionNone {
		q.settle(key)
		return a, nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return a, wrap("reconcile", s.Namespace, s.Name, err)
	}
	done, err := r.act(ctx, s, live, now, a)
	if err != nil {
		return a, err
	}
	fenced := q.settle(key)
	if !done {
		return Action{}, nil
	}
	r.mu.Lock()
	r.written[key] = s.ResourceVersion
	r.mu.Unlock()
	if r.actions != nil {
		ev := ActionEvent{Type: a.Type, Warn: a.Warn}
		if a.Type == ActionSuspend && !fenced.IsZero() {
			ev.SinceFence = time.Since(fenced)
		}
		r.actions(ev)
	}
	return a, nil
}

// decide decides for s with [Decide]. A cache whose fence watch was
// re-established has not yet seen what happened meanwhile: it can say
// absent, or an old uid, for a fence created or re-created since. Before
// suspending on that, decide gets the API server's word, and returns the
// fence it decided from.
func (r *Reconciler) decide(ctx context.Context, s Sandbox, live LiveFence, now time.Time) (LiveFence, Action, error) {
	a := Decide(s, live, now, r.grace)
	if a.Type != ActionSuspend || live.Present && live.Fence.UID == s.Fence.UID {
		return live, a, nil
	}
	fresh, err := r.driver.readFence(ctx, s.Namespace)
	if err != nil {
		return live, Action{}, wrap("reconcile", s.Namespace, s.Name, err)
	}
	return fresh, Decide(s, fresh, now, r.grace), nil
}

// failed reports a failure to the action observer.
func (r *Reconciler) failed(t ActionType, err error) {
	if r.actions != nil {
		r.actions(ActionEvent{Type: t, Err: err})
	}
}

// act carries out a on s. It patches from the state it was given; on
// conflict the object is read again and the decision made again, so a
// sandbox that converged meanwhile is left alone. It reports whether a
// patch was sent.
func (r *Reconciler) act(ctx context.Context, s *Sandbox, live LiveFence, now time.Time, a Action) (bool, error) {
	d := r.driver
	// The patches below are guarded by resourceVersion: a re-sent copy
	// fails with 409 and is decided again, so they are safe to retry.
	ctx = retry.ContextWithIdempotent(ctx)
	var patched bool
	var fenceErr error
	first := true
	out, err := d.update(ctx, "reconcile", s.Namespace, s.Name, s, func(cur Sandbox) *patch {
		patched = false
		decided := a
		if !first {
			// cur was read again after a conflict: decide again, with the
			// API server's fence where the cache's cannot be trusted.
			if live, decided, fenceErr = r.decide(ctx, cur, live, now); fenceErr != nil {
				return nil
			}
		}
		first = false
		if decided.Type != a.Type {
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
	if err == nil {
		err = fenceErr
	}
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
