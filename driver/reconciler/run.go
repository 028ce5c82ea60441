package reconciler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// probeBackoffCap bounds the wait between probes of the Sandbox API.
const probeBackoffCap = 30 * time.Second

// Run reconciles until ctx is done, driven by events, and returns ctx's
// error: it probes the Sandbox API, starts the informers, decides nothing
// before their caches have synced, and then runs the workers and the
// resync, with [WithLeaderElection] only while it leads. The package doc
// says how. While Run runs, a [Reconciler.Pass] or a second Run of the same
// reconciler fails with [ErrBusy].
func (r *Reconciler) Run(ctx context.Context) error {
	if err := r.claim(); err != nil {
		return err
	}
	defer r.unclaim()
	// While the API server is down, or agent-sandbox is not installed or
	// too old, probe again after 1s, doubling up to probeBackoffCap: one
	// log line each. Steps runs out at the cap, where Step stays.
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 5, Cap: probeBackoffCap}
	for err := r.core.Probe(ctx); err != nil; err = r.core.Probe(ctx) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		after := backoff.Step()
		r.log.Error(err, "probing the Sandbox API; retrying", "after", after)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(after):
		}
	}
	cluster := r.clusterScope(ctx)
	c := newCaches(r.core, cluster)
	for _, inf := range c.fences {
		// A failed list or watch leaves the cache as it was; the observers
		// hear it, and client-go logs it.
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, rf *cache.Reflector, err error) {
			r.failed(ActionNone, fmt.Errorf("reconciler: watching the fences: %w", err))
			cache.DefaultWatchErrorHandler(ctx, rf, err)
		})
	}
	q := &queue{track: len(r.observers) > 0, metrics: r.queueMetrics}
	for scope := range c.sandboxes {
		if err := r.handle(c, q, scope); err != nil {
			return err
		}
	}
	cacheCtx, stopCaches := context.WithCancel(ctx)
	defer func() {
		stopCaches()
		c.shutdown()
	}()
	if err := c.start(klog.NewContext(cacheCtx, r.log)); err != nil {
		return err
	}
	r.mu.Lock()
	r.synced = true
	r.mu.Unlock()
	r.log.V(1).Info("reconciler caches synced", "namespaces", len(c.served), "clusterScope", cluster)
	if r.election == nil {
		r.lead(ctx, c, q)
		return ctx.Err()
	}
	return r.elect(ctx, func(ctx context.Context) { r.lead(ctx, c, q) })
}

// handle queues sandboxes on the events of scope's informers, for the
// namespaces the driver serves.
func (r *Reconciler) handle(c *caches, q *queue, scope string) error {
	served := func(o any) (types.NamespacedName, bool) {
		key, ok := keyOf(o)
		return key, ok && c.serves[key.Namespace]
	}
	sandboxes := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { q.add(served(o)) },
		UpdateFunc: func(_, o any) { q.add(served(o)) },
		DeleteFunc: func(o any) {
			if key, ok := served(o); ok {
				r.mu.Lock()
				delete(r.written, key)
				r.mu.Unlock()
			}
		},
	}
	if _, err := c.sandboxes[scope].AddEventHandler(sandboxes); err != nil {
		return err
	}
	changed := q.namespace(c, true)
	fenceChanged := func(o any) {
		if key, ok := served(o); ok {
			changed(key.Namespace)
		}
	}
	fence := cache.ResourceEventHandlerFuncs{
		AddFunc:    fenceChanged,
		UpdateFunc: func(_, o any) { fenceChanged(o) },
		// A delete event is the API server's word that the fence is gone.
		DeleteFunc: fenceChanged,
	}
	_, err := c.fences[scope].AddEventHandler(fence)
	return err
}

// lead runs the workers and the resync until ctx is done, and returns once
// every worker has stopped.
func (r *Reconciler) lead(ctx context.Context, c *caches, q *queue) {
	wq := q.open()
	defer q.close()
	all := q.namespace(c, false)
	var wg sync.WaitGroup
	for i := 0; i < r.workers; i++ {
		wg.Go(func() {
			for r.work(ctx, c, q, wq) {
			}
		})
	}
	// Taking the lead queues every cached sandbox, and so does each
	// resync after it, the safety net.
	base, factor := r.resyncWait()
	resync := false
	wg.Go(func() {
		wait.JitterUntilWithContext(ctx, func(context.Context) {
			for _, ns := range c.served {
				all(ns)
			}
			if resync {
				r.log.V(1).Info("resync queued every cached sandbox")
			}
			resync = true
		}, base, factor, true)
	})
	<-ctx.Done()
	wq.ShutDown()
	wg.Wait()
}

// work reconciles one queued sandbox; it returns false when the queue is
// shut down.
func (r *Reconciler) work(ctx context.Context, c *caches, q *queue, wq workqueue.TypedRateLimitingInterface[types.NamespacedName]) bool {
	key, shutdown := wq.Get()
	if shutdown {
		return false
	}
	defer wq.Done(key)
	if ctx.Err() != nil {
		return true
	}
	s, ok := c.sandbox(key)
	if !ok {
		wq.Forget(key)
		q.settle(key)
		return true
	}
	now := time.Now()
	if a, err := r.reconcile(ctx, q, &s, c.fence(key.Namespace), now); err != nil {
		if ctx.Err() == nil {
			r.log.Error(err, "reconciling sandbox; retrying", "namespace", key.Namespace, "sandbox", key.Name)
			r.failed(a.Type, err)
			wq.AddRateLimited(key)
		}
		return true
	}
	wq.Forget(key)
	// A bootstrap may become overdue without any event: look again when
	// its grace ends.
	if s.Running && !s.BootstrapStarted.IsZero() {
		if left := s.BootstrapStarted.Add(r.grace).Sub(now); left > 0 {
			wq.AddAfter(key, left+time.Second)
		}
	}
	return true
}

// queue is the work queue of the current leadership term; events that
// arrive while this replica does not lead are dropped, since taking the
// lead queues every cached sandbox.
type queue struct {
	// track says to keep fence-change times, for an observer.
	track bool
	// metrics is the queue's metrics provider; nil for client-go's global.
	metrics workqueue.MetricsProvider

	mu sync.Mutex
	wq workqueue.TypedRateLimitingInterface[types.NamespacedName]
	// term is the metrics provider of wq; nil for client-go's global.
	term *termMetrics
	// fenced holds, per queued sandbox, when the reconciler first observed
	// a fence change it has not yet decided on. Only while tracking.
	fenced map[types.NamespacedName]time.Time
}

func (q *queue) open() workqueue.TypedRateLimitingInterface[types.NamespacedName] {
	q.mu.Lock()
	defer q.mu.Unlock()
	cfg := workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: queueName}
	if q.metrics != nil {
		q.term = &termMetrics{MetricsProvider: q.metrics}
		cfg.MetricsProvider = q.term
	}
	q.wq = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](), cfg)
	if q.track {
		q.fenced = map[types.NamespacedName]time.Time{}
	}
	return q.wq
}

// close forgets the term's queue, once it is shut down and its workers
// have stopped.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.term != nil {
		q.term.stopped()
		q.term = nil
	}
	q.wq = nil
	q.fenced = nil
}

// termMetrics is the metrics provider of one term's queue. client-go's
// queue sets its unfinished-work and longest-running-processor gauges
// every 500 ms until it shuts down, and leaves them at their last values,
// the time of writes that the end of the term cut short: stopped sets them
// to zero, as no worker runs between terms.
type termMetrics struct {
	workqueue.MetricsProvider
	gauges []workqueue.SettableGaugeMetric
}

func (p *termMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.keep(p.MetricsProvider.NewUnfinishedWorkSecondsMetric(name))
}

func (p *termMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.keep(p.MetricsProvider.NewLongestRunningProcessorSecondsMetric(name))
}

func (p *termMetrics) keep(g workqueue.SettableGaugeMetric) workqueue.SettableGaugeMetric {
	p.gauges = append(p.gauges, g)
	return g
}

// stopped sets the term's gauges to zero. The queue must be shut down:
// ShutDown returns once the queue has stopped setting them.
func (p *termMetrics) stopped() {
	for _, g := range p.gauges {
		g.Set(0)
	}
}

// settle forgets key's pending fence change, once it has been decided on,
// and returns when it was observed: zero if none was pending. q may be
// nil.
func (q *queue) settle(key types.NamespacedName) time.Time {
	if q == nil || !q.track {
		return time.Time{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at := q.fenced[key]
	delete(q.fenced, key)
	return at
}

// add queues key if ok, while a term's queue is open.
func (q *queue) add(key types.NamespacedName, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ok && q.wq != nil {
		q.wq.Add(key)
	}
}

// namespace returns a function that queues every cached sandbox of a
// namespace; with fence, it is a fence change, whose time it keeps for
// each sandbox that has none pending.
func (q *queue) namespace(c *caches, fence bool) func(ns string) {
	return func(ns string) {
		var at time.Time
		if fence && q.track {
			at = time.Now()
		}
		keys := c.keys(ns)
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.wq == nil {
			return
		}
		for _, key := range keys {
			if !at.IsZero() {
				if _, pending := q.fenced[key]; !pending {
					q.fenced[key] = at
				}
			}
			q.wq.Add(key)
		}
	}
}

// Synced reports whether Run's caches have synced: a readiness check.
func (r *Reconciler) Synced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}
