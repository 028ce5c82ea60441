package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/core"
	"github.com/kubewire/kubewire/kubeadapter"
)

// PassStats counts what one [Reconciler.Pass] saw and did.
type PassStats struct {
	Seen     int
	Actions  int
	Errors   int
	Duration time.Duration
}

// ActionEvent reports one action the reconciler carried out, or one
// failure, in a [Reconciler.Pass] or in the work of [Reconciler.Run].
// Actions it decided but did not need to send (the sandbox converged
// meanwhile) are not reported.
type ActionEvent struct {
	// Type is the action. With Err set it is the action that was decided,
	// or ActionNone when the failure came before a decision: a read of a
	// namespace's fence or sandboxes in a pass, or a fence watch that
	// client-go reports failed in Run.
	Type ActionType
	// EventDropped says the warning's Event was over the driver's event
	// limit (driver.WithEventLimit) and was not recorded; the warning is
	// in the log.
	EventDropped bool
	// Err is nil when the action was carried out. A pass reports every
	// error it counts in [PassStats.Errors]; Run reports every failure it
	// queues again with backoff.
	Err error
	// SinceFence is the time from the reconciler observing a fence change
	// (the event of the fence's informer that queued this sandbox) to the
	// suspension being written. It is zero when the action did not answer
	// a fence change: not a suspension, a pass, or no fence event pending
	// for the sandbox. A failed write keeps the fence change pending, so
	// the retry that succeeds is measured from it.
	SinceFence time.Duration
}

// Reconciler converges a driver's sandboxes with their namespaces'
// fences. Construct it with [New]; the zero value is not usable. Its
// methods are safe for concurrent use.
type Reconciler struct {
	config
	core    *core.Core
	limiter *rate.Limiter // nil: no write limit
	log     logr.Logger

	mu sync.Mutex
	// busy is set while a Run or a Pass is under way: only one writes.
	busy bool
	// synced is set once Run's caches have synced.
	synced bool
	// written records, per sandbox, the resourceVersions that predate our
	// last write (the one it was decided from, and any read again after a
	// conflict), until the cache shows another: a cache that has not
	// caught up with our own write is not decided from again.
	written map[types.NamespacedName][]string
}

// New returns a reconciler for d's sandboxes. It starts nothing;
// [Reconciler.Run] does. The error names the first invalid option.
func New(d *driver.Driver, opts ...Option) (*Reconciler, error) {
	if d == nil {
		return nil, errors.New("reconciler: New: nil *driver.Driver")
	}
	c := defaults()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&c); err != nil {
			return nil, err
		}
	}
	cr := core.Of(d)
	if cr == nil {
		return nil, errors.New("reconciler: New: the driver was not made by driver.New or driver.NewForClients")
	}
	r := &Reconciler{config: c, core: cr, log: cr.Log, written: map[types.NamespacedName][]string{}}
	if c.writeBurst > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(c.writeQPS), c.writeBurst)
	}
	return r, nil
}

type observers []Observer

func (os observers) ObservePass(s PassStats) {
	for _, o := range os {
		o.ObservePass(s)
	}
}

func (os observers) ObserveAction(e ActionEvent) {
	for _, o := range os {
		o.ObserveAction(e)
	}
}

// jitter spreads resyncs over period*(1±jitter): they never beat in step
// with a timeout of the same length or with another replica's resync.
const jitter = 0.2

// resyncWait returns the base and factor of wait.Jitter that draw each
// wait between resyncs from period*(1±jitter).
func (r *Reconciler) resyncWait() (time.Duration, float64) {
	return time.Duration(float64(r.period) * (1 - jitter)), 2 * jitter / (1 - jitter)
}

// ErrBusy is the error of a [Reconciler.Run] or [Reconciler.Pass] started
// while another Run or Pass of the same reconciler is under way: one
// writer at a time, so that no sandbox is decided twice at once.
var ErrBusy = errors.New("reconciler: a Run or a Pass is under way; only one writes at a time")

func (r *Reconciler) claim() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		return ErrBusy
	}
	r.busy = true
	return nil
}

func (r *Reconciler) unclaim() {
	r.mu.Lock()
	r.busy, r.synced = false, false
	r.mu.Unlock()
}

// Pass runs one sweep from the API server: for each namespace it reads the
// fence and lists the sandboxes, decides for each and carries the actions
// out. A namespace whose fence or sandboxes cannot be read is skipped:
// nothing is decided from unknown state. The error joins every failure of
// the pass; the stats count them. Beside a Run or another Pass it fails
// with [ErrBusy].
func (r *Reconciler) Pass(ctx context.Context) (PassStats, error) {
	if err := r.claim(); err != nil {
		return PassStats{}, err
	}
	defer r.unclaim()
	start := time.Now()
	var stats PassStats
	var errs []error
	for _, ns := range r.core.Namespaces {
		live, sandboxes, err := r.read(ctx, ns)
		if err != nil {
			stats.Errors++
			errs = append(errs, err)
			r.failed(ActionNone, err)
			continue
		}
		now := time.Now()
		for i := range sandboxes {
			stats.Seen++
			a, err := r.reconcile(ctx, nil, &sandboxes[i], live, now)
			if err != nil {
				stats.Errors++
				errs = append(errs, err)
				r.failed(a.Type, err)
				continue
			}
			if a.Type != ActionNone {
				stats.Actions++
			}
		}
	}
	stats.Duration = time.Since(start)
	r.observers.ObservePass(stats)
	r.log.V(1).Info("reconcile pass", "seen", stats.Seen, "actions", stats.Actions, "errors", stats.Errors, "duration", stats.Duration)
	return stats, errors.Join(errs...)
}

// read returns ns's live fence and sandboxes from the API server.
func (r *Reconciler) read(ctx context.Context, ns string) (liveFence, []core.Sandbox, error) {
	live, err := r.readFence(ctx, ns, "")
	if err != nil {
		return liveFence{}, nil, err
	}
	sandboxes, err := r.core.List(ctx, ns)
	if err != nil {
		return liveFence{}, nil, fail(ns, "", "listing sandboxes", err)
	}
	return live, sandboxes, nil
}

func (r *Reconciler) readFence(ctx context.Context, ns, name string) (liveFence, error) {
	f, present, err := r.core.ReadFence(ctx, ns)
	if err != nil {
		return liveFence{}, fail(ns, name, "reading the fence", err)
	}
	return liveFence{known: true, present: present, fence: f}, nil
}

// fail returns err, of what the reconciler was doing about ns/name, with
// both named; it keeps the chain whole.
func fail(ns, name, doing string, err error) error {
	if name == "" {
		return fmt.Errorf("reconciler: %s of %s: %w", doing, ns, err)
	}
	return fmt.Errorf("reconciler: %s for sandbox %s/%s: %w", doing, ns, name, err)
}

// reconcile decides for s and carries the action out. It returns the
// action taken: ActionNone when there was nothing to do, or when the
// sandbox converged meanwhile; with an error, the action decided. It
// reports the action carried out; the caller reports the error. q, when
// not nil, holds the sandbox's pending fence change, which a decision
// settles and a failure leaves pending.
func (r *Reconciler) reconcile(ctx context.Context, q *queue, s *core.Sandbox, live liveFence, now time.Time) (action, error) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	r.mu.Lock()
	before, wrote := r.written[key]
	if wrote && !slices.Contains(before, s.ResourceVersion) {
		delete(r.written, key)
		wrote = false
	}
	r.mu.Unlock()
	if wrote {
		// The cache's event of our own write brings the sandbox back.
		return action{}, nil
	}
	live, a, err := r.decideFresh(ctx, *s, live, now)
	if err != nil {
		return action{}, err
	}
	if a.Type == ActionNone {
		q.settle(key)
		return a, nil
	}
	if r.limiter != nil {
		if err := r.limiter.Wait(ctx); err != nil {
			return a, fail(s.Namespace, s.Name, "waiting for the write limit", err)
		}
	}
	before, dropped, err := r.act(ctx, s, live, now, a)
	if err != nil {
		return a, fail(s.Namespace, s.Name, a.Type.name(), err)
	}
	fenced := q.settle(key)
	if before == nil {
		return action{}, nil
	}
	r.mu.Lock()
	r.written[key] = before
	r.mu.Unlock()
	ev := ActionEvent{Type: a.Type, EventDropped: dropped}
	if a.Type == ActionSuspend && !fenced.IsZero() {
		ev.SinceFence = time.Since(fenced)
	}
	r.observers.ObserveAction(ev)
	return a, nil
}

// decideFresh decides for s with decide. A cache whose fence watch was
// re-established has not yet seen what happened meanwhile: it can say
// absent, or an old uid, for a fence created or re-created since. Before
// suspending on that, decide gets the API server's word, and returns the
// fence it decided from.
func (r *Reconciler) decideFresh(ctx context.Context, s core.Sandbox, live liveFence, now time.Time) (liveFence, action, error) {
	a := decide(s, live, now, r.grace)
	if a.Type != ActionSuspend || live.present && live.fence.UID == s.Fence.UID {
		return live, a, nil
	}
	fresh, err := r.readFence(ctx, s.Namespace, s.Name)
	if err != nil {
		return live, action{}, err
	}
	return fresh, decide(s, fresh, now, r.grace), nil
}

func (r *Reconciler) failed(t ActionType, err error) {
	r.observers.ObserveAction(ActionEvent{Type: t, Err: err})
}

// act carries out a on s. It patches from the state it was given; on
// conflict the object is read again and the decision made again, so a
// sandbox that converged meanwhile is left alone. When a patch was
// applied it returns the resourceVersions that predate it, nil when none
// was, and whether the warning's Event was dropped.
func (r *Reconciler) act(ctx context.Context, s *core.Sandbox, live liveFence, now time.Time, a action) ([]string, bool, error) {
	var patched, resent bool
	var fenceErr error
	var before []string
	first := true
	out, err := r.core.Update(ctx, s.Namespace, s.Name, s, func(cur core.Sandbox, conflict error) *core.Patch {
		patched, resent = false, false
		before = append(before, cur.ResourceVersion)
		decided := a
		if !first {
			// cur was read again after a conflict: decide again, with the
			// API server's fence where the cache's cannot be trusted.
			if live, decided, fenceErr = r.decideFresh(ctx, cur, live, now); fenceErr != nil {
				return nil
			}
		}
		first = false
		if decided.Type != a.Type {
			// The conflict refused a copy sent again after the connection
			// failed under the first; if cur is what the first would have
			// made it, the first was most likely applied: report the
			// action, with its warning and Event, rather than lose it.
			// Another writer that did the same in between (driver.Stop, an
			// earlier leader) looks the same, and is reported as ours.
			patched = kubeadapter.IsMaybeApplied(conflict) && applied(a.Type, cur)
			if resent = patched; resent {
				// cur is what the first copy wrote, not a state from
				// before a write: the cache must not skip it.
				before = before[:len(before)-1]
			}
			return nil
		}
		switch a.Type {
		case ActionSuspend, ActionRollback:
			patched = true
			return core.SuspendPatch()
		case ActionClearBootstrap:
			patched = true
			return core.ClearBootstrapPatch()
		}
		return nil
	})
	if err == nil {
		err = fenceErr
	}
	if err != nil {
		return nil, false, err
	}
	if !patched {
		return nil, false, nil
	}
	dropped := false
	if a.Warn {
		kv := []any{"namespace", s.Namespace, "sandbox", s.Name, "action", a.Type.name(),
			"recordedFenceUID", s.Fence.UID, "recordedFenceGeneration", s.Fence.Generation,
			"liveFenceUID", live.fence.UID, "liveFenceGeneration", live.fence.Generation}
		if resent {
			kv = append(kv, "maybeAppliedByEarlierCopy", true)
		}
		r.log.Info("warning: "+a.Message, kv...)
		dropped = !r.core.Warn(out, a.Reason, actionVerb(a.Type), a.Message)
	}
	return before, dropped, nil
}

// applied reports whether s is in the state the patch of action t makes:
// suspended with no bootstrap mark, or without the mark.
func applied(t ActionType, s core.Sandbox) bool {
	switch t {
	case ActionSuspend, ActionRollback:
		return !s.Running && s.BootstrapStarted.IsZero()
	case ActionClearBootstrap:
		return s.BootstrapStarted.IsZero()
	}
	return false
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
