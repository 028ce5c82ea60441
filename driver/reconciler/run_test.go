package reconciler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

// runReconciler runs rec until the test ends or stop is called.
func runReconciler(t *testing.T, rec *reconciler.Reconciler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			assert.ErrorIs(t, <-done, context.Canceled)
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRunOnFakes: Run on client-go's fake clientsets. Sandboxes admitted
// under the current fences are left alone; a fence's generation moving on
// (its informer's event, not a resync: the period is an hour) suspends the
// running sandboxes of its namespace, each once, with a warning and an
// Event, each timed from the fence change; the other namespace is not
// touched.
func TestRunOnFakes(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddFence(t, "team-b", "fence-b", 2)
	names := []string{"sb-0", "sb-1", "sb-2"}
	for _, name := range names {
		f.AddSandbox(t, "team-a", name, true, "fence-a", 2)
	}
	f.AddSandbox(t, "team-a", "stopped", false, "fence-a", 2)
	f.AddSandbox(t, "team-b", "sb-x", true, "fence-b", 2)
	var l drivertest.Logs
	var mu sync.Mutex
	var events []reconciler.ActionEvent
	rec := newReconciler(t, f.Driver(t, &l), reconciler.WithPeriod(time.Hour), reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}))
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, drivertest.Settle, 10*time.Millisecond)

	f.AddFence(t, "team-a", "fence-a", 3)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range names {
			run, err := f.Running("team-a", name)
			assert.NoError(c, err)
			assert.False(c, run, "%s suspended", name)
		}
		assert.Equal(c, len(names), f.Count("create", "events"), "one Event per suspension")
		mu.Lock()
		defer mu.Unlock()
		assert.Len(c, events, len(names), "one action per suspension")
	}, drivertest.Settle, 10*time.Millisecond)
	patched := map[string]int{}
	for _, a := range f.Actions("patch", "sandboxes") {
		patched[a.(k8stesting.PatchAction).GetName()]++
	}
	assert.Equal(t, map[string]int{"sb-0": 1, "sb-1": 1, "sb-2": 1}, patched, "each running sandbox of team-a patched once; no other")
	assert.True(t, running(t, f, "team-b", "sb-x"), "team-b's fence did not change")
	assert.Len(t, f.Events(context.Background(), t), len(names))
	assert.Equal(t, len(names), l.Count(staleWarning))
	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		assert.Equal(t, reconciler.ActionSuspend, e.Type)
		assert.NoError(t, e.Err)
		assert.Positive(t, e.SinceFence, "timed from the fence change")
	}
}
