package drivermetrics

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
)

// documented is every metric of the package doc and its label names.
var documented = map[string][]string{
	"kubewire_reconciler_passes_total":                            nil,
	"kubewire_reconciler_pass_duration_seconds":                   nil,
	"kubewire_reconciler_actions_total":                           {"action"},
	"kubewire_reconciler_warnings_total":                          nil,
	"kubewire_reconciler_events_dropped_total":                    nil,
	"kubewire_reconciler_errors_total":                            nil,
	"kubewire_reconciler_queue_depth":                             nil,
	"kubewire_reconciler_queue_adds_total":                        nil,
	"kubewire_reconciler_queue_retries_total":                     nil,
	"kubewire_reconciler_queue_latency_seconds":                   nil,
	"kubewire_reconciler_queue_work_duration_seconds":             nil,
	"kubewire_reconciler_fence_to_suspend_seconds":                nil,
	"kubewire_reconciler_queue_unfinished_work_seconds":           nil,
	"kubewire_reconciler_queue_longest_running_processor_seconds": nil,
}

// TestScriptedRun feeds the observer what a reconciler reports for two
// passes and Run's workers, and scrapes a fresh registry: each thing
// is counted once, under the documented names and labels only, and
// promlint finds nothing.
func TestScriptedRun(t *testing.T) {
	m := New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	// A pass that suspended two sandboxes and could not read one
	// namespace; then a converged pass.
	m.ObservePass(reconciler.PassStats{Seen: 5, Actions: 2, Errors: 1, Duration: 250 * time.Millisecond})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionSuspend})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionSuspend})
	m.ObserveAction(reconciler.ActionEvent{Err: errors.New("fence of team-a: watch: connection refused")})
	m.ObservePass(reconciler.PassStats{Seen: 5, Duration: 2 * time.Millisecond})
	// Run's workers: a rollback, a bootstrap cleared, a suspension that
	// answered a fence change 30 ms after it, and one whose first write
	// failed and whose retry succeeded. Every suspension and rollback
	// warns; a cleared bootstrap and a failure do not.
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionRollback})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionClearBootstrap})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionSuspend, SinceFence: 30 * time.Millisecond})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionSuspend, Err: errors.New("PATCH: connection reset by peer")})
	m.ObserveAction(reconciler.ActionEvent{Type: reconciler.ActionSuspend, SinceFence: 4 * time.Second, EventDropped: true})

	const counts = `
# HELP kubewire_reconciler_actions_total Actions the reconciler carried out on sandboxes, by action: suspend (fence changed or missing), rollback (bootstrap failed past its grace period), clear_bootstrap.
# TYPE kubewire_reconciler_actions_total counter
kubewire_reconciler_actions_total{action="clear_bootstrap"} 1
kubewire_reconciler_actions_total{action="rollback"} 1
kubewire_reconciler_actions_total{action="suspend"} 4
# HELP kubewire_reconciler_errors_total Failed reads and writes of the reconciler, in passes and in Run's workers; a failed sandbox is retried and counts again.
# TYPE kubewire_reconciler_errors_total counter
kubewire_reconciler_errors_total 2
# HELP kubewire_reconciler_events_dropped_total Warnings whose Event the driver dropped over its event limit (driver.WithEventLimit); the warning is in the log.
# TYPE kubewire_reconciler_events_dropped_total counter
kubewire_reconciler_events_dropped_total 1
# HELP kubewire_reconciler_passes_total Reconcile passes (Reconciler.Pass) over every sandbox.
# TYPE kubewire_reconciler_passes_total counter
kubewire_reconciler_passes_total 2
# HELP kubewire_reconciler_queue_depth Sandboxes waiting in Run's work queue for a worker.
# TYPE kubewire_reconciler_queue_depth gauge
kubewire_reconciler_queue_depth 0
# HELP kubewire_reconciler_warnings_total Actions that were transitions worth a warning and an Event.
# TYPE kubewire_reconciler_warnings_total counter
kubewire_reconciler_warnings_total 5
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(counts),
		"kubewire_reconciler_actions_total", "kubewire_reconciler_errors_total", "kubewire_reconciler_events_dropped_total", "kubewire_reconciler_passes_total",
		"kubewire_reconciler_queue_depth", "kubewire_reconciler_warnings_total"))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		want, ok := documented[mf.GetName()]
		if !assert.True(t, ok, "undocumented metric %s", mf.GetName()) {
			continue
		}
		for _, metric := range mf.GetMetric() {
			var got []string
			for _, l := range metric.GetLabel() {
				got = append(got, l.GetName())
			}
			assert.Equal(t, want, got, "labels of %s", mf.GetName())
		}
		if h := mf.GetMetric()[0].GetHistogram(); h != nil {
			switch mf.GetName() {
			case "kubewire_reconciler_pass_duration_seconds":
				assert.EqualValues(t, 2, h.GetSampleCount())
				assert.InDelta(t, 0.252, h.GetSampleSum(), 1e-9)
			case "kubewire_reconciler_fence_to_suspend_seconds":
				assert.EqualValues(t, 2, h.GetSampleCount(), "the suspensions that answered an observed fence change")
				assert.InDelta(t, 4.03, h.GetSampleSum(), 1e-9)
			}
		}
	}
	assert.Len(t, names, len(documented), "every documented metric is exported, even at zero")

	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestEveryActionHasALabel: an action type added to reconciler without a
// label here would go uncounted. ActionType has no exported way to list
// its values, so they are read from package reconciler's source.
func TestEveryActionHasALabel(t *testing.T) {
	m := New()
	actions := actionTypes(t)
	require.Equal(t, map[string]reconciler.ActionType{
		"ActionNone": reconciler.ActionNone, "ActionSuspend": reconciler.ActionSuspend,
		"ActionRollback": reconciler.ActionRollback, "ActionClearBootstrap": reconciler.ActionClearBootstrap,
	}, pick(actions, "ActionNone", "ActionSuspend", "ActionRollback", "ActionClearBootstrap"), "the source read is the package compiled")
	n := 0
	for name, at := range actions {
		if at == reconciler.ActionNone {
			continue
		}
		assert.NotEmpty(t, actionLabel(at), name)
		assert.Contains(t, m.byAction, at, name)
		n++
	}
	assert.Len(t, m.byAction, n)
}

// actionTypes returns the constants of type ActionType that package
// reconciler declares, by name, type-checked from its source. Its imports
// do not matter to them: they are not loaded.
func actionTypes(t *testing.T) map[string]reconciler.ActionType {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "reconciler", "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	noImports := importerFunc(func(path string) (*types.Package, error) { return nil, fmt.Errorf("%s: not loaded", path) })
	conf := types.Config{Importer: noImports, Error: func(error) {}}
	pkg, _ := conf.Check("github.com/kubewire/kubewire/driver/reconciler", fset, files, nil)
	typ := pkg.Scope().Lookup("ActionType")
	require.NotNil(t, typ, "package reconciler declares ActionType")
	out := map[string]reconciler.ActionType{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !types.Identical(c.Type(), typ.Type()) {
			continue
		}
		v, exact := constant.Int64Val(c.Val())
		require.True(t, exact, name)
		out[name] = reconciler.ActionType(v)
	}
	return out
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// pick returns the entries of m named.
func pick[V any](m map[string]V, names ...string) map[string]V {
	out := map[string]V{}
	for _, name := range names {
		if v, ok := m[name]; ok {
			out[name] = v
		}
	}
	return out
}

// TestWired: the reconciler's passes reach the observer.
func TestWired(t *testing.T) {
	d, err := driver.New(&rest.Config{Host: "http://127.0.0.1:1"}, "gw", []string{"a"})
	require.NoError(t, err)
	defer d.Close()
	m := New()
	rec, err := reconciler.New(d, reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()))
	require.NoError(t, err)
	_, err = rec.Pass(context.Background())
	require.Error(t, err, "nothing listens on 127.0.0.1:1")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.passes))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.errors))
}

// TestQueueTerms: client-go's workqueue reports to the provider across
// two queues of one name, as Run makes one per leadership term. Each term
// ends with a sandbox queued again while a worker held it and one waiting
// out a backoff; the queue is drained the way Run's workers drain it.
// Depth returns to zero after each term, and adds and retries add up.
func TestQueueTerms(t *testing.T) {
	m := New()
	for term := 1; term <= 2; term++ {
		// A backoff of an hour: the sandbox waiting it out is never added
		// before the term ends, however slow the machine (the default's
		// 5 ms made the counts race the test).
		backoff := workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour)
		q := workqueue.NewTypedRateLimitingQueueWithConfig(backoff,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName, MetricsProvider: m.Queue()})
		for i := 0; i < 10; i++ {
			q.Add(fmt.Sprint("sb-", i))
		}
		key, _ := q.Get()
		q.Add(key) // queued again while a worker holds it
		q.Done(key)
		q.AddRateLimited("sb-late")
		assert.Equal(t, float64(10), testutil.ToFloat64(m.queueDepth), "term %d", term)
		q.ShutDown()
		for {
			key, shutdown := q.Get()
			if shutdown {
				break
			}
			q.Done(key)
		}
		assert.Zero(t, testutil.ToFloat64(m.queueDepth), "term %d: the queue drained", term)
		assert.Equal(t, float64(11*term), testutil.ToFloat64(m.queueAdds), "term %d", term)
		assert.Equal(t, float64(term), testutil.ToFloat64(m.queueRetries), "term %d", term)
	}
}

// TestQueueUnfinishedWork: two queues of one name, as two reconcilers
// wired to one Metrics make, each with a worker on an item. client-go's
// workqueue sets each queue's figures every 500 ms; unfinished work is
// their sum and the longest-running processor their largest, and both
// return to zero once the workers are done.
func TestQueueUnfinishedWork(t *testing.T) {
	m := New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	var queues []workqueue.TypedRateLimitingInterface[string]
	for i := 0; i < 2; i++ {
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName, MetricsProvider: m.Queue()})
		defer q.ShutDown()
		q.Add("sb")
		_, _ = q.Get()
		queues = append(queues, q)
	}
	require.Eventually(t, func() bool {
		unfinished, longest := gauge(t, reg, "queue_unfinished_work_seconds"), gauge(t, reg, "queue_longest_running_processor_seconds")
		return longest > 0 && unfinished > longest
	}, 10*time.Second, 10*time.Millisecond, "two workers' time summed, and the longer one's")
	for _, q := range queues {
		q.Done("sb")
	}
	require.Eventually(t, func() bool {
		return gauge(t, reg, "queue_unfinished_work_seconds") == 0 && gauge(t, reg, "queue_longest_running_processor_seconds") == 0
	}, 10*time.Second, 10*time.Millisecond, "no work in progress")
}

// gauge gathers the gauge kubewire_reconciler_<name> from g; NaN if g
// has none. It asserts, for Eventually's goroutine.
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if !assert.NoError(t, err) {
		return math.NaN()
	}
	for _, mf := range mfs {
		if mf.GetName() == namespace+"_"+subsystem+"_"+name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return math.NaN()
}

// queueName is the name Run gives its work queue.
const queueName = "kubewire-reconciler"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
