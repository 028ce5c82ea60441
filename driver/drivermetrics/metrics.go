package drivermetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/driver"
)

const (
	namespace = "kubewire"
	subsystem = "reconciler"
)

// buckets run from 5 ms to 10 minutes, for both the duration of a pass
// and the time from a fence change to a suspension.
var buckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is a prometheus.Collector of the metrics of the reconcilers it
// is wired to with [Metrics.Option]. Make it with [New]; the zero value is
// not usable. It is safe for concurrent use.
type Metrics struct {
	passes         prometheus.Counter
	passDuration   prometheus.Histogram
	actions        *prometheus.CounterVec
	byAction       map[driver.ActionType]prometheus.Counter
	warnings       prometheus.Counter
	errors         prometheus.Counter
	queueDepth     prometheus.GaugeFunc
	fenceToSuspend prometheus.Histogram

	mu          sync.Mutex
	reconcilers []*driver.Reconciler
}

// New returns the collectors, every count at zero. Register it on a
// registry, then wire it to a reconciler with [Metrics.Option].
func New() *Metrics {
	m := &Metrics{
		passes: prometheus.NewCounter(prometheus.CounterOpts(opts("passes_total",
			"Full reconcile passes over every sandbox, the periodic resyncs of Run included."))),
		passDuration: histogram("pass_duration_seconds",
			"Duration of a full reconcile pass, in seconds."),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("actions_total",
			"Actions the reconciler carried out on sandboxes, by action: suspend (fence changed or missing), rollback (bootstrap failed past its grace period), clear_bootstrap.")),
			[]string{"action"}),
		warnings: prometheus.NewCounter(prometheus.CounterOpts(opts("warnings_total",
			"Actions that were transitions worth a warning and an Event."))),
		errors: prometheus.NewCounter(prometheus.CounterOpts(opts("errors_total",
			"Failed reads and writes of the reconciler, in passes and in event-driven work; a failed sandbox is retried and counts again."))),
		fenceToSuspend: histogram("fence_to_suspend_seconds",
			"Time from the reconciler observing a fence change to the suspension of a sandbox that ran under the old fence, in seconds."),
		byAction: map[driver.ActionType]prometheus.Counter{},
	}
	m.queueDepth = prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("queue_depth",
		"Sandboxes waiting in the event-driven work queue for a worker.")), m.depth)
	for _, t := range []driver.ActionType{driver.ActionSuspend, driver.ActionRollback, driver.ActionClearBootstrap} {
		m.byAction[t] = m.actions.WithLabelValues(actionLabel(t))
	}
	return m
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}
}

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets})
}

// actionLabel is the action label of t.
func actionLabel(t driver.ActionType) string {
	switch t {
	case driver.ActionSuspend:
		return "suspend"
	case driver.ActionRollback:
		return "rollback"
	case driver.ActionClearBootstrap:
		return "clear_bootstrap"
	}
	return ""
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.passes, m.passDuration, m.actions, m.warnings, m.errors, m.queueDepth, m.fenceToSuspend}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Option wires m to the reconciler it configures: it adds a pass observer
// and an action observer ([driver.WithObserver],
// [driver.WithActionObserver]; observers compose, so those of other
// options stay), and queue_depth reads the
// [driver.Reconciler.QueueDepth] of the reconciler that
// [driver.NewReconciler] builds ([driver.WithReconcilerHook]); a
// NewReconciler that fails on an invalid option leaves m as it was. One
// Metrics may be wired to several reconcilers; it then counts their sum.
func (m *Metrics) Option() driver.ReconcilerOption {
	return driver.ReconcilerOptions(
		driver.WithObserver(m.observePass),
		driver.WithActionObserver(m.observeAction),
		driver.WithReconcilerHook(m.add),
	)
}

// add makes queue_depth count r.
func (m *Metrics) add(r *driver.Reconciler) {
	m.mu.Lock()
	m.reconcilers = append(m.reconcilers, r)
	m.mu.Unlock()
}

func (m *Metrics) observePass(s driver.PassStats) {
	m.passes.Inc()
	m.passDuration.Observe(s.Duration.Seconds())
}

func (m *Metrics) observeAction(ev driver.ActionEvent) {
	if ev.Err != nil {
		m.errors.Inc()
		return
	}
	if c, ok := m.byAction[ev.Type]; ok {
		c.Inc()
	}
	if ev.Warn {
		m.warnings.Inc()
	}
	if ev.SinceFence > 0 {
		m.fenceToSuspend.Observe(ev.SinceFence.Seconds())
	}
}

func (m *Metrics) depth() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.reconcilers {
		n += r.QueueDepth()
	}
	return float64(n)
}
