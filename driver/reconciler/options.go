package reconciler

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// Defaults.
const (
	// defaultPeriod is the resync period: the safety net that queues
	// every cached sandbox again. Events drive the reconciler; the resync
	// reads the cache, not the API server.
	defaultPeriod         = 10 * time.Minute
	defaultBootstrapGrace = 5 * time.Minute
	// defaultWorkers bounds the writes in flight: a fence change over
	// 50,000 sandboxes becomes a steady stream of suspensions, not 50,000
	// concurrent PATCHes.
	defaultWorkers = 8
)

// queueName names Run's work queue to a workqueue.MetricsProvider.
const queueName = "kubewire-reconciler"

// Option configures [New].
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	period       time.Duration
	grace        time.Duration
	workers      int
	writeQPS     float64
	writeBurst   int
	election     *LeaderElection
	observers    observers
	queueMetrics workqueue.MetricsProvider
	// cluster, when not nil, overrides the choice of watches.
	cluster *bool
}

func defaults() config {
	return config{
		period: defaultPeriod, grace: defaultBootstrapGrace, workers: defaultWorkers,
	}
}

// maxPeriod bounds the resync period: a safety net that runs less than
// once a day is none, and the jittered wait of a period near the largest
// Duration would overflow.
const maxPeriod = 24 * time.Hour

// WithPeriod sets the resync period. Default: 10 minutes. Each wait is
// drawn from period*(1±0.2), so that the resync never beats in step with
// a timeout of the same length or with another replica's resync. Must be
// from 1s to 24h: the resync is a safety net over the cache, a shorter
// period turns it into a busy loop, and a longer one leaves it unused.
func WithPeriod(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		switch {
		case d < time.Second:
			return fmt.Errorf("reconciler: WithPeriod must be at least 1s, got %v", d)
		case d > maxPeriod:
			return fmt.Errorf("reconciler: WithPeriod must be at most %v, got %v", maxPeriod, d)
		}
		c.period = d
		return nil
	})
}

// WithBootstrapGrace sets how long a create or start may take before a
// failure or a stuck start reported by the controller rolls it back.
// Default: 5 minutes. Must be positive: with no grace, a
// start that the scheduler reports Unschedulable for a moment (while a
// cluster autoscaler adds a node) would be rolled back at once.
func WithBootstrapGrace(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("reconciler: WithBootstrapGrace must be positive, got %v", d)
		}
		c.grace = d
		return nil
	})
}

// WithWorkers sets how many sandboxes Run acts on at once, which bounds
// the writes in flight. Default: 8. Must be at least 1.
func WithWorkers(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("reconciler: WithWorkers must be at least 1, got %d", n)
		}
		c.workers = n
		return nil
	})
}

// WithClusterWatch makes Run watch the whole cluster (true) or each
// namespace it serves (false), instead of choosing: by default it watches
// the whole cluster from 10 namespaces on, when a SelfSubjectAccessReview
// says this client may list and watch there, and each namespace otherwise.
// Set it to skip the access reviews when RBAC is known, to keep one watch
// for a few namespaces, or to keep per-namespace watches (and caches of
// only the served namespaces' objects) for many. Forcing the whole
// cluster without that permission gets every list and watch refused, and
// Run never syncs its caches. Default: Run chooses.
func WithClusterWatch(cluster bool) Option {
	return optionFunc(func(c *config) error {
		c.cluster = &cluster
		return nil
	})
}

// WithWriteLimit bounds the rate of the reconciler's writes to qps per
// second with bursts of burst. Default: none. A suspension outside the
// fence is a security action: by default it goes as fast as the workers
// ([WithWorkers]) and the API server's Priority and Fairness let it, as
// controller-runtime's controllers run, and as the driver's client allows
// (unthrottled unless the caller's rest.Config sets a QPS; see
// driver.New). A qps of rate.Inf (or +Inf) removes the bound. qps must be
// positive and burst at least 1: a limit of 0 lets the first burst
// through and then no write ever again, and a burst of 0 refuses every
// write.
func WithWriteLimit(qps float64, burst int) Option {
	return optionFunc(func(c *config) error {
		limit, err := core.Limit("reconciler: WithWriteLimit", qps, burst)
		if err != nil {
			return err
		}
		c.writeQPS, c.writeBurst = limit, burst
		return nil
	})
}

// WithObserver adds o to the reconciler's observers: each hears every
// pass and every action, in the order of the options. Must not be nil.
// Default: none.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) error {
		if o == nil {
			return errors.New("reconciler: WithObserver must not be nil")
		}
		if core.IsNil(o) {
			return fmt.Errorf("reconciler: WithObserver must not be nil, got a nil %T", o)
		}
		c.observers = append(c.observers, o)
		return nil
	})
}

// WithQueueMetrics gives Run's work queue p as its metrics provider,
// under the name kubewire-reconciler. Run makes a queue, and asks p for its
// metrics, for each leadership term; when a term ends, it sets the
// queue's unfinished-work and longest-running-processor gauges to zero.
// Default: client-go's global provider (workqueue.SetProvider), which is a
// no-op unless a program installs one, as controller-runtime does. Must
// not be nil.
func WithQueueMetrics(p workqueue.MetricsProvider) Option {
	return optionFunc(func(c *config) error {
		if p == nil {
			return errors.New("reconciler: WithQueueMetrics must not be nil")
		}
		if core.IsNil(p) {
			return fmt.Errorf("reconciler: WithQueueMetrics must not be nil, got a nil %T", p)
		}
		c.queueMetrics = p
		return nil
	})
}

// Observer hears what the reconciler does. Its methods are called on the
// goroutine that did the work, concurrently from Run's workers, which wait
// for them: they must be quick and safe for concurrent use. Package
// drivermetrics has one.
type Observer interface {
	// ObservePass is called with the counts of each [Reconciler.Pass].
	ObservePass(PassStats)
	// ObserveAction is called with each action carried out and each
	// failure, in passes and in Run's workers.
	ObserveAction(ActionEvent)
}
