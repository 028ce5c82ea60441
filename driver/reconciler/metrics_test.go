package reconciler_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

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
