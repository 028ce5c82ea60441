package driver

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/retry"
)

// Reconciler defaults.
const (
	DefaultPeriod = 30 * time.Second
	// DefaultJitter spreads passes over period*(1±DefaultJitter).
	DefaultJitter         = 0.2
	DefaultBootstrapGrace = 5 * time.Minute
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
// fences. Construct it with [NewReconciler]; it is safe to call Pass from
// one goroutine at a time.
type Reconciler struct {
	driver   *Driver
	period   time.Duration
	jitter   float64
	grace    time.Duration
	observer func(PassStats)
	log      logr.Logger
}

// ReconcilerOption configures [NewReconciler].
type ReconcilerOption func(*Reconciler)

// WithPeriod sets the time between passes. Default: [DefaultPeriod].
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
// failure reported by the API server rolls it back. Default:
// [DefaultBootstrapGrace].
func WithBootstrapGrace(d time.Duration) ReconcilerOption {
	return func(r *Reconciler) { r.grace = d }
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
	r := &Reconciler{driver: d, period: DefaultPeriod, jitter: DefaultJitter, grace: DefaultBootstrapGrace, log: d.opts.logger}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return r
}

// Run runs a pass at once and then one every period, jittered, until ctx
// is done, and returns ctx's error. A failed pass is logged and the next one
// tries again.
func (r *Reconciler) Run(ctx context.Context) error {
	for {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "reconcile pass failed; retrying next period")
		}
		t := time.NewTimer(r.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// next returns the jittered wait before the next pass.
func (r *Reconciler) next() time.Duration {
	f := 1 + r.jitter*(2*rand.Float64()-1)
	return time.Duration(float64(r.period) * f)
}

// Pass runs one reconcile pass: for each namespace it reads the fence and
// lists the sandboxes (paginated), decides for each sandbox with [Decide]
// and carries the actions out. A namespace whose fence or list cannot be
// read is skipped: nothing is decided from unknown state. The error joins
// every failure of the pass; the stats count them.
func (r *Reconciler) Pass(ctx context.Context) (PassStats, error) {
	start := time.Now()
	var stats PassStats
	var errs []error
	d := r.driver
	for _, ns := range d.namespaces {
		live, err := d.readFence(ctx, ns)
		if err != nil {
			stats.Errors++
			errs = append(errs, wrap("reconcile", ns, "", err))
			continue
		}
		sandboxes, err := d.list(ctx, ns)
		if err != nil {
			stats.Errors++
			errs = append(errs, err)
			continue
		}
		now := d.opts.now()
		for i := range sandboxes {
			s := &sandboxes[i]
			stats.Seen++
			a := Decide(*s, live, now, r.grace)
			if a.Type == ActionNone {
				continue
			}
			done, err := r.act(ctx, s, live, now, a)
			if err != nil {
				stats.Errors++
				errs = append(errs, err)
				continue
			}
			if done {
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

// act carries out a on s. It patches from the listed state; on conflict
// the object is read again and the decision made again, so a sandbox that
// converged meanwhile is left alone. It reports whether a patch was sent.
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
