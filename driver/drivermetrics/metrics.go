package drivermetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubewire/kubewire/driver/reconciler"
)

const (
	namespace = "kubewire"
	subsystem = "reconciler"
)

// buckets run from 5 ms to 10 minutes, for the duration of a pass, the
// time from a fence change to a suspension and the queue's waits.
var buckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is a prometheus.Collector of the metrics of the reconcilers it
// is wired to: it is their [reconciler.Observer] ([reconciler.WithObserver])
// and, through [Metrics.Queue], their work queue's
// workqueue.MetricsProvider ([reconciler.WithQueueMetrics]). Make it with
// [New]; the zero value is not usable. It is safe for concurrent use.
// Wired to several reconcilers, it counts their sum; of their
// longest-running processors, it shows the longest.
type Metrics struct {
	passes         prometheus.Counter
	passDuration   prometheus.Histogram
	actions        *prometheus.CounterVec
	byAction       map[reconciler.ActionType]prometheus.Counter
	warnings       prometheus.Counter
	eventsDropped  prometheus.Counter
	errors         prometheus.Counter
	fenceToSuspend prometheus.Histogram
	queueDepth     prometheus.Gauge
	queueAdds      prometheus.Counter
	queueRetries   prometheus.Counter
	queueLatency   prometheus.Histogram
	workDuration   prometheus.Histogram
	unfinished     *shared
	longest        *shared
}

var (
	_ reconciler.Observer       = (*Metrics)(nil)
	_ workqueue.MetricsProvider = queue{}
)

// New returns the collectors, every count at zero. Register it on a
// registry, then give it to [reconciler.New] with [reconciler.WithObserver]
// and [reconciler.WithQueueMetrics].
func New() *Metrics {
	m := &Metrics{
		passes: counter("passes_total",
			"Reconcile passes (Reconciler.Pass) over every sandbox."),
		passDuration: histogram("pass_duration_seconds",
			"Duration of a reconcile pass, in seconds."),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("actions_total",
			"Actions the reconciler carried out on sandboxes, by action: suspend (fence changed or missing), rollback (bootstrap failed past its grace period), clear_bootstrap.")),
			[]string{"action"}),
		warnings: counter("warnings_total",
			"Actions that were transitions worth a warning and an Event."),
		eventsDropped: counter("events_dropped_total",
			"Warnings whose Event the driver dropped over its event limit (driver.WithEventLimit); the warning is in the log."),
		errors: counter("errors_total",
			"Failed reads and writes of the reconciler, in passes and in Run's workers; a failed sandbox is retried and counts again."),
		fenceToSuspend: histogram("fence_to_suspend_seconds",
			"Time from the reconciler observing a fence change to the suspension of a sandbox that ran under the old fence, in seconds."),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts(opts("queue_depth",
			"Sandboxes waiting in Run's work queue for a worker."))),
		queueAdds: counter("queue_adds_total",
			"Sandboxes added to Run's work queue: by an event, a resync or a retry."),
		queueRetries: counter("queue_retries_total",
			"Sandboxes queued again with backoff after a failure."),
		queueLatency: histogram("queue_latency_seconds",
			"Time a sandbox waited in Run's work queue before a worker took it, in seconds."),
		workDuration: histogram("queue_work_duration_seconds",
			"Time a worker spent on one sandbox, in seconds."),
		unfinished: &shared{gauge: prometheus.NewGauge(prometheus.GaugeOpts(opts("queue_unfinished_work_seconds",
			"Seconds of work in progress in Run's work queue that queue_work_duration_seconds has not observed yet, summed over the workers. Large values indicate stuck workers; the rate at which it grows is their number.")))},
		longest: &shared{max: true, gauge: prometheus.NewGauge(prometheus.GaugeOpts(opts("queue_longest_running_processor_seconds",
			"Seconds the longest-running worker of Run's work queue has spent on its current sandbox.")))},
		byAction: map[reconciler.ActionType]prometheus.Counter{},
	}
	for _, t := range []reconciler.ActionType{reconciler.ActionSuspend, reconciler.ActionRollback, reconciler.ActionClearBootstrap} {
		m.byAction[t] = m.actions.WithLabelValues(actionLabel(t))
	}
	return m
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts(opts(name, help)))
}

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets})
}

// actionLabel is the action label of t.
func actionLabel(t reconciler.ActionType) string {
	switch t {
	case reconciler.ActionSuspend:
		return "suspend"
	case reconciler.ActionRollback:
		return "rollback"
	case reconciler.ActionClearBootstrap:
		return "clear_bootstrap"
	}
	return ""
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.passes, m.passDuration, m.actions, m.warnings, m.eventsDropped, m.errors, m.fenceToSuspend,
		m.queueDepth, m.queueAdds, m.queueRetries, m.queueLatency, m.workDuration, m.unfinished.gauge, m.longest.gauge}
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

// ObservePass counts a pass; it implements [reconciler.Observer].
func (m *Metrics) ObservePass(s reconciler.PassStats) {
	m.passes.Inc()
	m.passDuration.Observe(s.Duration.Seconds())
}

// ObserveAction counts an action or a failure; it implements
// [reconciler.Observer].
func (m *Metrics) ObserveAction(ev reconciler.ActionEvent) {
	if ev.Err != nil {
		m.errors.Inc()
		return
	}
	if c, ok := m.byAction[ev.Type]; ok {
		c.Inc()
	}
	if ev.Type == reconciler.ActionSuspend || ev.Type == reconciler.ActionRollback {
		// Each is a transition that warns: a log line and an Event.
		m.warnings.Inc()
	}
	if ev.EventDropped {
		m.eventsDropped.Inc()
	}
	if ev.SinceFence > 0 {
		m.fenceToSuspend.Observe(ev.SinceFence.Seconds())
	}
}

// Queue returns the work queue's metrics provider, for
// [reconciler.WithQueueMetrics].
func (m *Metrics) Queue() workqueue.MetricsProvider { return queue{m} }

// queue is m's workqueue.MetricsProvider. It hands every queue the same
// collectors, whatever its name: a reconciler's queue is made again for
// each leadership term, and one Metrics counts the sum of its reconcilers.
// The two gauges a queue sets rather than adds to get a share each.
type queue struct{ m *Metrics }

func (q queue) NewDepthMetric(string) workqueue.GaugeMetric { return q.m.queueDepth }

func (q queue) NewAddsMetric(string) workqueue.CounterMetric { return q.m.queueAdds }

func (q queue) NewLatencyMetric(string) workqueue.HistogramMetric { return q.m.queueLatency }

func (q queue) NewWorkDurationMetric(string) workqueue.HistogramMetric { return q.m.workDuration }

func (q queue) NewRetriesMetric(string) workqueue.CounterMetric { return q.m.queueRetries }

// Each queue sets its own figure; the gauge shows their sum.
func (q queue) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return &share{of: q.m.unfinished}
}

// Each queue sets its own figure; the gauge shows the largest.
func (q queue) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return &share{of: q.m.longest}
}

// shared is a gauge that several queues set, each its own share: a queue
// sets the whole value, so one gauge handed to each would show whichever
// queue set it last. It keeps the shares that are not zero: a queue that
// shuts down stops setting its share, and Run sets it to zero at the end
// of each leadership term, when no worker runs.
type shared struct {
	gauge prometheus.Gauge
	// max says to show the largest share instead of the sum.
	max bool

	mu     sync.Mutex
	shares map[*share]float64
}

// share is one queue's share of a shared gauge.
type share struct{ of *shared }

func (s *share) Set(v float64) {
	g := s.of
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shares == nil {
		g.shares = map[*share]float64{}
	}
	if v == 0 {
		delete(g.shares, s)
	} else {
		g.shares[s] = v
	}
	var total float64
	for _, v := range g.shares {
		if g.max {
			total = max(total, v)
		} else {
			total += v
		}
	}
	g.gauge.Set(total)
}
