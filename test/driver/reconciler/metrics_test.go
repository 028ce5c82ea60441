package reconciler_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

// TestRunMetrics: Run with drivermetrics on a real API server and
// agent-sandbox's controller. A fence change queues the running sandboxes;
// the first suspension writes of one fail and are retried; every running
// sandbox is suspended once, and each suspension is timed from the fence
// change.
func TestRunMetrics(t *testing.T) {
	r := rig.Current(t)
	const n = 10
	names, counter, d := counted(t, r, n)
	m, reg := metrics(t)
	// One worker at 20 writes a second: the fence change's sandboxes wait
	// in the queue long enough to be seen there.
	rec := newReconciler(t, d, reconciler.WithPeriod(time.Hour), reconciler.WithWorkers(1), reconciler.WithWriteLimit(20, 1), reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()))
	runReconciler(t, rec)
	waitBootstrapped(t, r, names)
	require.Eventually(t, func() bool { return scrape(t, reg)[mClearBootstrap] == n }, rig.Settle, 20*time.Millisecond)
	counter.Reset()

	counter.SetFail(func(req *http.Request) bool {
		return req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/sandboxes/sb-0")
	})
	moveFence(t, r)
	require.Eventually(t, func() bool { return scrape(t, reg)[mQueueDepth] > 0 }, rig.Settle, time.Millisecond, "the fence change queues its sandboxes")
	require.Eventually(t, func() bool { return scrape(t, reg)[mErrors] > 0 }, rig.Settle, 20*time.Millisecond, "the failed write is counted")
	counter.SetFail(nil)
	waitFor(t, d, r.NS, names, "suspended", suspended)
	// A sandbox shows suspended before the worker that suspended it has
	// its answer and counts the action, and agent-sandbox's controller
	// keeps writing status afterwards, each write queueing the sandbox
	// again for a moment: the figures are read once they have settled.
	var got map[string]float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = scrape(t, reg)
		assert.Equal(c, float64(n), got[mSuspend], "one suspension per running sandbox")
		assert.Equal(c, float64(n), got[mFenceToSuspend], "each suspension timed from the fence change, retries included")
		assert.Equal(c, float64(n), got[mWarnings])
		assert.Zero(c, got[mQueueDepth], "the queue drains")
	}, rig.Settle, 20*time.Millisecond)
	assert.Equal(t, float64(n), got[mClearBootstrap])
	assert.Zero(t, got[mRollback])
	assert.Zero(t, got[mPasses], "Run is no pass")
	assert.Positive(t, got[mErrors])
	patches := counter.Reset()
	assert.Greater(t, patches["sb-0"], 1, "sb-0's write failed, then succeeded")
	for _, name := range names[1:] {
		assert.Equal(t, 1, patches[name], "%s patched once", name)
	}
}

// TestRunUnfinishedWork: a worker held inside a suspension write shows in
// the unfinished-work and longest-running-processor gauges while it is
// held, in each leadership term, although Run makes a new queue for each.
// Between the terms no worker runs and the queue is gone: both gauges and
// the depth read zero. The terms are read from the reconciler's log: it
// says "leading" when a term's workers start and "stopped leading" once
// they have stopped.
func TestRunUnfinishedWork(t *testing.T) {
	r := rig.Current(t)
	var l rig.Logs
	names, counter, d := counted(t, r, 2, driver.WithLogger(l.Logger()))
	m, reg := metrics(t)
	const lease = "gw-reconciler"
	rec := newReconciler(t, d, reconciler.WithPeriod(time.Hour), reconciler.WithWorkers(1), reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()),
		reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: r.NS, Name: lease, Identity: "a", LeaseDuration: 3 * time.Second}))
	runReconciler(t, rec)
	require.Eventually(t, func() bool { return terms(&l) == 1 }, rig.Settle, 20*time.Millisecond, "the first term starts")
	waitBootstrapped(t, r, names)

	// sb-0's suspension is held until released, or until its term ends.
	held, release := make(chan struct{}, 1), make(chan struct{})
	counter.SetFail(func(req *http.Request) bool {
		if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/sandboxes/sb-0") {
			return false
		}
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return false
		case <-req.Context().Done():
			return true
		}
	})
	heldOverASecond := func(term string) {
		t.Helper()
		select {
		case <-held:
		case <-time.After(rig.Settle):
			t.Fatalf("%s: sb-0's suspension never came", term)
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := scrape(c, reg)
			assert.Greater(c, got[mLongest], 1.0, "%s: the held worker's time", term)
			assert.GreaterOrEqual(c, got[mUnfinished], got[mLongest], "%s: one worker", term)
		}, rig.Settle, 20*time.Millisecond)
	}
	zero := func(when string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := scrape(c, reg)
			assert.Zero(c, got[mUnfinished], when)
			assert.Zero(c, got[mLongest], when)
			assert.Zero(c, got[mQueueDepth], when)
		}, rig.Settle, 20*time.Millisecond)
	}

	moveFence(t, r)
	heldOverASecond("first term")

	// Another holder takes the lease: the term ends, the held write with
	// it.
	leases := r.CS.CoordinationV1().Leases(r.NS)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		intruder, forever := "intruder", int32(3600)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &intruder, &forever
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	}))
	require.Eventually(t, func() bool { return l.Count(stoppedLeading) == 1 }, rig.Settle, 20*time.Millisecond, "the first term ends")
	zero("between terms")

	require.NoError(t, leases.Delete(context.Background(), lease, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return terms(&l) == 2 }, rig.Settle, 20*time.Millisecond, "the second term starts")
	heldOverASecond("second term")
	close(release)
	waitFor(t, d, r.NS, names, "suspended", suspended)
	zero("once the write is done")
}
