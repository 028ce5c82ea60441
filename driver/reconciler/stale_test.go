package reconciler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

// TestStaleFenceCacheReadAgain: the fence cache keeps no watch-health
// state of its own, so after a broken watch it shows the fence as it was.
// A sandbox admitted meanwhile under a re-created fence (another uid)
// looks, from that cache, like one running outside its fence: before
// suspending it the reconciler reads the fence from the API server, which
// says the sandbox is inside it, and nothing is written. The fake's fence
// watch never delivers an event, so the cache stays stale for the whole
// test.
func TestStaleFenceCacheReadAgain(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-old", 1)
	f.AddFence(t, "team-b", "fence-b", 1)
	f.AddSandbox(t, "team-a", "sb-0", true, "fence-old", 1)
	f.Kube.PrependWatchReactor("networkpolicies", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil // silent: the cache keeps what it listed
	})
	var reads atomic.Int32
	f.Kube.PrependReactor("get", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads.Add(1)
		return false, nil, nil
	})
	d := f.Driver(t, nil)
	var suspensions atomic.Int32
	rec := newReconciler(t, d, reconciler.WithObserver(&observer{action: func(ev reconciler.ActionEvent) {
		if ev.Type == reconciler.ActionSuspend {
			suspensions.Add(1)
		}
	}}))
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, 10*time.Second, 5*time.Millisecond)

	// The fence is re-created; sb-0 is started again under it, which the
	// sandbox watch reports and the fence watch does not.
	f.AddFence(t, "team-a", "fence-new", 1)
	before := reads.Load()
	s, err := d.Start(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	require.Equal(t, "fence-new", string(s.FenceUID), "Start admits sb-0 under the new fence")
	before++ // Start's own read of the fence

	require.Eventually(t, func() bool { return reads.Load() > before }, 10*time.Second, 5*time.Millisecond,
		"the reconciler reads the fence from the API server before suspending on its cache")
	// The sandbox's Ready condition is current, so the reconciler then
	// clears the bootstrap mark: a patch, but not a suspension.
	require.Never(t, func() bool { return suspensions.Load() > 0 }, 500*time.Millisecond, 10*time.Millisecond,
		"sb-0 runs inside the live fence: it is not suspended")
	s, err = d.Get(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.True(t, s.Running)
}
