package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/metrics/internal/shared"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// Metrics collects the stack's metrics (see the package documentation). It
// is a prometheus.Collector; register it on one registry. Make it with
// [New]; the zero value is not usable. Its methods are safe for concurrent
// use.
type Metrics struct {
	attempts *vec[attemptKey, prometheus.Counter]
	duration *vec[durationKey, prometheus.Observer]
	idle     *vec[string, prometheus.Observer]
	resends  *vec[string, prometheus.Counter]
	retries  *vec[retryKey, prometheus.Counter]
	gaveUp   *vec[retryKey, prometheus.Counter]
	exceeded *vec[exceededKey, prometheus.Counter]

	collectors []prometheus.Collector
}

type (
	attemptKey  struct{ method, protocol, reused, outcome string }
	durationKey struct{ method, outcome string }
	retryKey    struct{ method, value string }
	exceededKey struct{ method, phase string }
)

// New returns metrics with no observations.
func New() *Metrics {
	const ns = "kubewire"
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "http", Name: "attempts_total",
		Help: "Request attempts, by method, protocol, whether the connection was reused, and outcome (status class or error).",
	}, []string{"method", "protocol", "reused", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Subsystem: "http", Name: "attempt_duration_seconds",
		Help:    "Time from sending a request attempt to its response headers or error, in seconds.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"method", "outcome"})
	idle := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Subsystem: "http", Name: "connection_idle_seconds",
		Help:    "How long a reused connection had been idle when a request took it, in seconds.",
		Buckets: []float64{.1, .5, 1, 5, 15, 30, 60, 90, 120, 300, 600},
	}, []string{"protocol"})
	resends := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "http", Name: "resends_total",
		Help: "Requests net/http re-sent on its own after they failed on a reused connection; the server may have executed them twice.",
	}, []string{"method"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "retry", Name: "retries_total",
		Help: "Retries made, by method and the class of the failure (not_sent, maybe_sent, status).",
	}, []string{"method", "class"})
	gaveUp := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "retry", Name: "gave_up_total",
		Help: "Requests whose retrying stopped without success, by method and reason (budget: the retry budget refused; maybe_applied: a re-sent write was refused, and its earlier copy may have been applied).",
	}, []string{"method", "reason"})
	exceeded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "timeout", Name: "exceeded_total",
		Help: "Requests whose timeout ran out, by method and phase (headers, body, stalled).",
	}, []string{"method", "phase"})
	return &Metrics{
		attempts:   counters(attempts, func(k attemptKey) []string { return []string{k.method, k.protocol, k.reused, k.outcome} }),
		duration:   observers(duration, func(k durationKey) []string { return []string{k.method, k.outcome} }),
		idle:       observers(idle, func(k string) []string { return []string{k} }),
		resends:    counters(resends, func(k string) []string { return []string{k} }),
		retries:    counters(retries, func(k retryKey) []string { return []string{k.method, k.value} }),
		gaveUp:     counters(gaveUp, func(k retryKey) []string { return []string{k.method, k.value} }),
		exceeded:   counters(exceeded, func(k exceededKey) []string { return []string{k.method, k.phase} }),
		collectors: []prometheus.Collector{attempts, duration, idle, resends, retries, gaveUp, exceeded},
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// Stack returns kubewire's stack for a plain http.Client, observed by m:
// retry.New(retryOpts...) over pooltrace.New() over timeout.New(d).
// It is the net/http counterpart of kubeadapter.WithObserver(m). To give
// the layers other options, pass m's methods to each layer's WithObserver.
func (m *Metrics) Stack(d time.Duration, retryOpts ...retry.Option) transport.Middleware {
	return stack.New(d, m.observed(retryOpts)...)
}

// observed returns the options of a stack that m observes.
func (m *Metrics) observed(retryOpts []retry.Option) []stack.Option {
	return []stack.Option{
		stack.WithRetryOptions(append(retryOpts[:len(retryOpts):len(retryOpts)], retry.WithObserver(m.ObserveDecision))...),
		stack.WithPooltraceOptions(pooltrace.WithObserver(m.ObserveAttempt)),
		stack.WithTimeoutOptions(timeout.WithObserver(m.ObserveExceeded)),
	}
}

// ObserveAttempt counts one attempt; it is pooltrace's observer.
func (m *Metrics) ObserveAttempt(a pooltrace.Attempt) {
	method := methodLabel(a.Method)
	protocol, reused := "none", "false"
	if a.HasConn {
		protocol = protocolLabel(a.Conn.Proto)
		if a.Conn.Reused {
			reused = "true"
			if a.Conn.WasIdle {
				m.idle.get(protocol).Observe(a.Conn.IdleTime.Seconds())
			}
		}
	}
	outcome := outcomeLabel(a.StatusCode, a.Err)
	m.attempts.get(attemptKey{method, protocol, reused, outcome}).Inc()
	m.duration.get(durationKey{method, outcome}).Observe(a.Duration.Seconds())
	if n := len(a.Earlier); n > 0 {
		m.resends.get(method).Add(float64(n))
	}
}

// ObserveDecision counts a retry or the end of retrying; it is retry's
// observer.
func (m *Metrics) ObserveDecision(d retry.Decision) {
	method := methodLabel(d.Request.Method)
	if !d.Retry {
		m.gaveUp.get(retryKey{method, shared.Label(shared.ReasonLabels, d.Reason)}).Inc()
		return
	}
	class := "status"
	if d.Err != nil {
		class = shared.Label(shared.ClassLabels, d.Class)
	}
	m.retries.get(retryKey{method, class}).Inc()
}

// ObserveExceeded counts a request whose timeout ran out; it is timeout's
// observer.
func (m *Metrics) ObserveExceeded(e timeout.Exceeded) {
	m.exceeded.get(exceededKey{methodLabel(e.Request.Method), shared.Label(shared.PhaseLabels, e.Phase)}).Inc()
}

// vec caches the children of a metric vector by a comparable key, so that
// an observation costs a map read instead of the label slice
// WithLabelValues allocates.
type vec[K comparable, M any] struct {
	child  func(...string) M
	labels func(K) []string

	mu sync.RWMutex
	m  map[K]M
}

func counters[K comparable](v *prometheus.CounterVec, labels func(K) []string) *vec[K, prometheus.Counter] {
	return &vec[K, prometheus.Counter]{child: v.WithLabelValues, labels: labels, m: map[K]prometheus.Counter{}}
}

func observers[K comparable](v *prometheus.HistogramVec, labels func(K) []string) *vec[K, prometheus.Observer] {
	return &vec[K, prometheus.Observer]{child: v.WithLabelValues, labels: labels, m: map[K]prometheus.Observer{}}
}

func (v *vec[K, M]) get(k K) M {
	v.mu.RLock()
	c, ok := v.m[k]
	v.mu.RUnlock()
	if ok {
		return c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.m[k]; ok {
		return c
	}
	c = v.child(v.labels(k)...)
	v.m[k] = c
	return c
}

func methodLabel(m string) string {
	switch m {
	case "":
		return http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
}

func protocolLabel(p string) string {
	switch p {
	case "HTTP/1.1", "HTTP/2.0":
		return p
	case "HTTP/1.0":
		return "HTTP/1.1"
	}
	return "other"
}

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func outcomeLabel(status int, err error) string {
	if err != nil || status < 100 || status > 599 {
		return "error"
	}
	return statusClasses[status/100-1]
}
