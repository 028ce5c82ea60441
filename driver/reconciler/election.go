package reconciler

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// defaultLeaseDuration is client-go's and controller-runtime's.
const defaultLeaseDuration = 15 * time.Second

// LeaderElection configures leader election on a coordination.k8s.io/v1
// Lease, with client-go's tools/leaderelection, for a gateway that runs as
// several replicas: every replica keeps warm caches, only the leader
// writes, and a follower takes over within the lease duration.
type LeaderElection struct {
	// Namespace and Name name the Lease. Required.
	Namespace string
	Name      string
	// Identity is this replica's name in the Lease. Default: the host
	// name and a random suffix.
	Identity string
	// LeaseDuration is how long a follower waits before it takes over a
	// lease its leader stopped renewing. Default (for zero): 15s. The
	// leader renews it within two thirds of it (client-go's
	// RenewDeadline; 10s by default) and a follower tries every 2/15 of
	// it (RetryPeriod; 2s), client-go's proportions. Must be a whole
	// number of seconds, as a Lease holds it.
	LeaseDuration time.Duration
}

// WithLeaderElection makes [Reconciler.Run] act only while it holds the
// Lease le names. Default: no election; Run always acts. le's Namespace
// and Name must name a Lease, and its LeaseDuration must be positive
// (zero takes the default).
func WithLeaderElection(le LeaderElection) Option {
	return optionFunc(func(c *config) error {
		cfg, err := le.config()
		if err != nil {
			return err
		}
		c.election = &cfg
		return nil
	})
}

// maxLeaseDuration is the longest LeaseDuration a Lease can hold: its
// spec.leaseDurationSeconds is an int32.
const maxLeaseDuration = math.MaxInt32 * time.Second

// config fills in defaults and checks le; the error names the field and
// the value.
func (le LeaderElection) config() (LeaderElection, error) {
	if errs := validation.IsDNS1123Label(le.Namespace); len(errs) > 0 {
		return le, fmt.Errorf("reconciler: WithLeaderElection Namespace %q is not a valid namespace name", le.Namespace)
	}
	if errs := validation.IsDNS1123Subdomain(le.Name); len(errs) > 0 {
		return le, fmt.Errorf("reconciler: WithLeaderElection Name %q is not a valid object name", le.Name)
	}
	if le.Identity == "" {
		host, _ := os.Hostname()
		le.Identity = host + "_" + rand.String(8)
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = defaultLeaseDuration
	}
	if le.LeaseDuration < 0 {
		return le, fmt.Errorf("reconciler: WithLeaderElection LeaseDuration must be positive, got %v", le.LeaseDuration)
	}
	if le.LeaseDuration > maxLeaseDuration {
		return le, fmt.Errorf("reconciler: WithLeaderElection LeaseDuration must be at most %v (a Lease holds it in int32 seconds), got %v", maxLeaseDuration, le.LeaseDuration)
	}
	if le.LeaseDuration%time.Second != 0 {
		// client-go writes int(LeaseDuration / time.Second): 900ms would
		// be a Lease of 0 seconds, which no replica ever leads.
		return le, fmt.Errorf("reconciler: WithLeaderElection LeaseDuration must be a whole number of seconds (a Lease holds it in seconds), got %v", le.LeaseDuration)
	}
	return le, nil
}

// elect runs lead while this replica holds the lease, again after each
// time it loses it, until ctx is done. client-go's elector logs to the
// reconciler's logger and releases the lease when a term ends
// (ReleaseOnCancel), so that a follower takes over at once instead of
// after the lease duration; the term's lock (see [term.Update]) first
// stops lead and waits for its workers, so that the next leader never
// runs beside the last one.
func (r *Reconciler) elect(ctx context.Context, lead func(context.Context)) error {
	cfg := *r.election
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     r.core.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	ctx = klog.NewContext(ctx, r.log)
	for ctx.Err() == nil {
		t := &term{Interface: lock, identity: cfg.Identity, stopped: make(chan struct{})}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            t,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.LeaseDuration * 2 / 3,
			RetryPeriod:     cfg.LeaseDuration * 2 / 15,
			ReleaseOnCancel: true,
			Name:            cfg.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					r.log.Info("leading", "lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
					t.run(ctx, lead)
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("reconciler: leader election: %w", err)
		}
		le.Run(ctx)
		if t.acquired.Load() {
			// client-go starts lead in a goroutine once it holds the lease,
			// and returns without waiting for it: the next term must not
			// overlap this one.
			<-t.stopped
			r.log.Info("stopped leading", "lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
		}
	}
	return ctx.Err()
}

// term is the Lease lock of one leadership term, and what the term knows:
// whether this replica wrote the lease as its holder (after which
// client-go always starts lead), lead's context, and whether lead has
// returned.
type term struct {
	resourcelock.Interface
	identity string
	acquired atomic.Bool
	stopped  chan struct{} // closed when lead has returned

	mu        sync.Mutex
	cancel    context.CancelFunc // of lead's context, once lead runs
	cancelled bool
}

// run runs lead on a context that the release can end.
func (t *term) run(ctx context.Context, lead func(context.Context)) {
	defer close(t.stopped)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.mu.Lock()
	t.cancel = cancel
	if t.cancelled {
		cancel()
	}
	t.mu.Unlock()
	lead(ctx)
}

// stopLead ends lead's context, now or as soon as lead runs.
func (t *term) stopLead() {
	t.mu.Lock()
	t.cancelled = true
	if t.cancel != nil {
		t.cancel()
	}
	t.mu.Unlock()
}

func (t *term) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := t.Interface.Create(ctx, rec)
	t.wrote(rec, err)
	return err
}

// Update writes rec. A record that names no holder is client-go's release
// (ReleaseOnCancel), which it sends as soon as the term ends, before lead's
// context ends when the term ended because renewals failed: the workers
// would run on past the lease. The release therefore stops lead and waits
// for it first, then reads the lease again and leaves it alone if another
// replica holds it by now: client-go judges that from the record it last
// saw.
func (t *term) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if rec.HolderIdentity != "" {
		err := t.Interface.Update(ctx, rec)
		t.wrote(rec, err)
		return err
	}
	t.stopLead()
	select {
	case <-t.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	cur, _, err := t.Interface.Get(ctx)
	if err != nil {
		return err
	}
	if cur.HolderIdentity != t.identity {
		return nil
	}
	return t.Interface.Update(ctx, rec)
}

func (t *term) wrote(rec resourcelock.LeaderElectionRecord, err error) {
	if err == nil && rec.HolderIdentity == t.identity {
		t.acquired.Store(true)
	}
}
