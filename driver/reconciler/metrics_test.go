package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubewire/kubewire/driver/drivermetrics"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

const (
	mPasses         = "kubewire_reconciler_passes_total"
	mPassDuration   = "kubewire_reconciler_pass_duration_seconds_count"
	mSuspend        = `kubewire_reconciler_actions_total{action="suspend"}`
	mRollback       = `kubewire_reconciler_actions_total{action="rollback"}`
	mClearBootstrap = `kubewire_reconciler_actions_total{action="clear_bootstrap"}`
	mWarnings       = "kubewire_reconciler_warnings_total"
	mErrors         = "kubewire_reconciler_errors_total"
	mQueueDepth     = "kubewire_reconciler_queue_depth"
	mWorkDone       = "kubewire_reconciler_queue_work_duration_seconds_count"
	mQueueAdds      = "kubewire_reconciler_queue_adds_total"
	mQueueRetries   = "kubewire_reconciler_queue_retries_total"
	mQueueLatency   = "kubewire_reconciler_queue_latency_seconds_count"
	mFenceToSuspend = "kubewire_reconciler_fence_to_suspend_seconds_count"
	mUnfinished     = "kubewire_reconciler_queue_unfinished_work_seconds"
	mLongest        = "kubewire_reconciler_queue_longest_running_processor_seconds"
	mEventsDropped  = "kubewire_reconciler_events_dropped_total"
)

// metrics returns a fresh registry with m registered.
func metrics(t *testing.T) (*drivermetrics.Metrics, *prometheus.Registry) {
	m := drivermetrics.New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	return m, reg
}

// scrape gathers g: each counter and gauge by name and labels, each
// histogram's count as name_count.
func scrape(t require.TestingT, g prometheus.Gatherer) map[string]float64 {
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestPassMetrics: passes on client-go's fake clientsets, observed by
// drivermetrics between two other observers, which still see everything:
// observers compose.
func TestPassMetrics(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	m, reg := metrics(t)
	var passes, events int
	r := newReconciler(t, f.Driver(t, nil),
		reconciler.WithObserver(&observer{pass: func(reconciler.PassStats) { passes++ }}),
		reconciler.WithObserver(m),
		reconciler.WithObserver(&observer{action: func(reconciler.ActionEvent) { events++ }}))
	_, err := r.Pass(context.Background())
	require.NoError(t, err)
	f.Fault("get", "networkpolicies", func(k8stesting.Action) error {
		return apierrors.NewInternalError(errors.New("etcdserver: leader changed"))
	})
	_, err = r.Pass(context.Background())
	require.Error(t, err)

	assert.Equal(t, map[string]float64{
		mPasses: 2, mPassDuration: 2,
		mSuspend: 5, mRollback: 0, mClearBootstrap: 0, mWarnings: 5, mEventsDropped: 0,
		mErrors:         2, // one fence read per namespace
		mFenceToSuspend: 0, // no Run, no fence event
		mQueueDepth:     0, mQueueAdds: 0, mQueueRetries: 0, mQueueLatency: 0, mWorkDone: 0,
		mUnfinished: 0, mLongest: 0,
	}, scrape(t, reg))
	assert.Equal(t, 2, passes)
	assert.Equal(t, 5+2, events)
}
