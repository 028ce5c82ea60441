package reconciler_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestStartStuckIsRolledBack: a start the scheduler cannot place is
// Starting while it waits; past the bootstrap grace the reconciler
// suspends it (never deletes it), with a warning.
func TestStartStuckIsRolledBack(t *testing.T) { startStuck(t, rig.Current(t)) }

func startStuck(t *testing.T, r *rig.Rig) {
	ctx := context.Background()
	r.Kubelet.Set("stuck", kubetest.PodUnschedulable)
	var l rig.Logs
	d := r.Driver(t, nil, driver.WithLogger(l.Logger()))
	_, err := d.Create(ctx, r.NS, "stuck", rig.AgentPod)
	require.NoError(t, err)
	var s driver.Sandbox
	// The controller mirrors the pod's PodScheduled (v0.5.6 and later): a
	// reason comes only from a condition that describes the current
	// generation, so this says it observed the start.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = d.Get(ctx, r.NS, "stuck")
		require.NoError(c, err)
		assert.Equal(c, corev1.PodReasonUnschedulable, s.Reason)
	}, rig.Settle, 20*time.Millisecond)
	assert.Equal(t, driver.PhaseStarting, s.Phase)

	rec := newReconciler(t, d, reconciler.WithBootstrapGrace(time.Hour))
	stats, err := rec.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, stats.Actions, "within the grace period")

	// The start is older than a millisecond: past this grace.
	rec = newReconciler(t, d, reconciler.WithBootstrapGrace(time.Millisecond))
	stats, err = rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions)
	assert.Equal(t, 1, l.Count("warning: sandbox did not start within the bootstrap grace period"), "a rollback warns")
	s = rig.WaitPhase(t, d, r.NS, "stuck", driver.PhaseStopped)
	assert.False(t, s.Running)
}

// seedRegression is the field report on the real controller: 7 suspended
// and 2 running sandboxes; the fence's generation moves; pass 1 writes
// once to each running sandbox and to no suspended one, with one Event per
// transition; passes 2 and 3 write nothing and warn about nothing.
func seedRegression(t *testing.T, r *rig.Rig) {
	ctx := context.Background()
	counter := rig.NewWrites()
	var l rig.Logs
	d := r.Driver(t, counter, driver.WithLogger(l.Logger()))
	// The seed's seven suspended sandboxes, and two running ones.
	names := []string{"run-0", "run-1", "sus-0", "sus-1", "sus-2", "sus-3", "sus-4", "sus-5", "sus-6"}
	for _, name := range names {
		_, err := d.Create(ctx, r.NS, name, rig.AgentPod)
		require.NoError(t, err)
	}
	for _, name := range names {
		rig.WaitPhase(t, d, r.NS, name, driver.PhaseReady)
	}
	for _, name := range names[2:] {
		_, err := d.Stop(ctx, r.NS, name)
		require.NoError(t, err)
	}
	for _, name := range names[2:] {
		rig.WaitPhase(t, d, r.NS, name, driver.PhaseStopped)
	}
	rec := newReconciler(t, d)
	stats, err := rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, stats.Actions, "the running sandboxes' bootstrap marks are cleared")
	assert.Zero(t, l.Count("warning:"), "clearing a bootstrap mark warns about nothing")

	// Change the fence's spec: the API server bumps its generation.
	np, err := r.CS.NetworkingV1().NetworkPolicies(r.NS).Get(ctx, rig.FenceName, metav1.GetOptions{})
	require.NoError(t, err)
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	np, err = r.CS.NetworkingV1().NetworkPolicies(r.NS).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, np.Generation)
	counter.Reset()

	stats, err = rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, reconciler.PassStats{Seen: 9, Actions: 2, Duration: stats.Duration}, stats)
	assert.Equal(t, map[string]int{"run-0": 1, "run-1": 1, "(any other write)": 0}, counter.Reset(), "pass 1: one write to each running sandbox")
	for pass := 2; pass <= 3; pass++ {
		stats, err = rec.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, reconciler.PassStats{Seen: 9, Duration: stats.Duration}, stats, "pass %d", pass)
		assert.Equal(t, map[string]int{"(any other write)": 0}, counter.Reset(), "pass %d writes nothing", pass)
	}
	assert.Equal(t, 2, l.Count(staleWarning), "one warning per transition")
	for _, name := range names[:2] {
		rig.WaitPhase(t, d, r.NS, name, driver.PhaseStopped)
	}

	// One Event per transition, through client-go's recorder.
	require.Eventually(t, func() bool { return len(staleEvents(t, r)) == 2 }, rig.Settle, 20*time.Millisecond)
	d.Close()
	for _, ev := range staleEvents(t, r) {
		assert.Contains(t, []string{"run-0", "run-1"}, ev.Regarding.Name)
		assert.Equal(t, "Sandbox", ev.Regarding.Kind)
		assert.Equal(t, corev1.EventTypeWarning, ev.Type)
		assert.Equal(t, "Suspend", ev.Action)
		assert.Nil(t, ev.Series, "a single occurrence, not a series")
	}
}

func staleEvents(t *testing.T, r *rig.Rig) []eventsv1.Event {
	list, err := r.CS.EventsV1().Events(r.NS).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.ReportingController == rig.DriverName && ev.Reason == "StaleFence" {
			out = append(out, ev)
		}
	}
	return out
}

func TestSeedRegression(t *testing.T) { seedRegression(t, rig.Current(t)) }

// TestUnreadableFence: when the fence cannot be read, the pass reports an
// error and writes nothing, though every sandbox runs under an old fence.
func TestUnreadableFence(t *testing.T) {
	r := rig.Current(t)
	ctx := context.Background()
	counter := rig.NewWrites()
	d := r.Driver(t, counter)
	for _, name := range []string{"a", "b"} {
		_, err := d.Create(ctx, r.NS, name, rig.AgentPod)
		require.NoError(t, err)
	}
	require.NoError(t, r.CS.NetworkingV1().NetworkPolicies(r.NS).Delete(ctx, rig.FenceName, metav1.DeleteOptions{}))
	counter.Reset()
	counter.SetFail(func(req *http.Request) bool { return strings.Contains(req.URL.Path, "/networkpolicies") })

	stats, err := newReconciler(t, d).Pass(ctx)
	require.Error(t, err)
	assert.ErrorContains(t, err, "reconciler: reading the fence of "+r.NS+": ")
	assert.ErrorContains(t, err, "injected")
	var ue *url.Error
	assert.ErrorAs(t, err, &ue, "the transport's error, whole")
	assert.Equal(t, 1, stats.Errors)
	assert.Zero(t, stats.Actions)
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.Reset(), "unknown is not absent: nothing written")
}

// TestLongNoteEvent: a rollback whose cause the controller describes at
// length (a scheduler's message of 1,162 bytes) still gets its Event, with
// the note cut to the 1,024 bytes events.k8s.io/v1 takes. The API server
// refused the whole Event before. The status is written as the controller
// writes it; no controller runs.
func TestLongNoteEvent(t *testing.T) {
	ctx := context.Background()
	r := rig.New(t, rig.Config(t))
	d := r.Driver(t, nil)
	_, err := d.Create(ctx, r.NS, "long", rig.AgentPod)
	require.NoError(t, err)
	cs, err := versioned.NewForConfig(r.Cfg)
	require.NoError(t, err)
	sb, err := cs.AgentsV1beta1().Sandboxes(r.NS).Get(ctx, "long", metav1.GetOptions{})
	require.NoError(t, err)
	msg := "0/3 nodes are available: " + strings.Repeat("1 node(s) didn't match Pod's node affinity/selector. ", 30)
	msg = msg[:1162]
	sb.Status.Conditions = []metav1.Condition{{Type: string(sandboxv1beta1.SandboxConditionReady), Status: metav1.ConditionFalse,
		Reason: sandboxv1beta1.SandboxReasonDependenciesNotReady, Message: msg, ObservedGeneration: sb.Generation, LastTransitionTime: metav1.Now()}}
	_, err = cs.AgentsV1beta1().Sandboxes(r.NS).UpdateStatus(ctx, sb, metav1.UpdateOptions{})
	require.NoError(t, err)

	stats, err := newReconciler(t, d, reconciler.WithBootstrapGrace(time.Millisecond)).Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Actions, "rolled back")
	var e eventsv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := r.CS.EventsV1().Events(r.NS).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		require.Len(c, l.Items, 1)
		e = l.Items[0]
	}, rig.Settle, 20*time.Millisecond, "no Event")
	assert.Equal(t, "BootstrapFailed", e.Reason)
	assert.Len(t, e.Note, 1024)
	assert.True(t, strings.HasSuffix(e.Note, "..."), e.Note)
}

// TestLostSuspensionAnswer: the API server applies a suspension whose
// answer the proxy cuts. kubeadapter sends the guarded patch again, the
// API server refuses the copy with 409 Conflict (its resourceVersion is
// gone), and the reconciler, reading the sandbox again, finds it
// suspended: it reports the suspension as its own, with the warning and
// the Event, instead of deciding there was nothing to do.
func TestLostSuspensionAnswer(t *testing.T) {
	r := rig.Current(t)
	ctx := context.Background()
	setup := r.Driver(t, nil)
	_, err := setup.Create(ctx, r.NS, "cut", rig.AgentPod)
	require.NoError(t, err)
	rig.WaitPhase(t, setup, r.NS, "cut", driver.PhaseReady)
	stats, err := newReconciler(t, setup).Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Actions, "the bootstrap mark is cleared")
	np, err := r.CS.NetworkingV1().NetworkPolicies(r.NS).Get(ctx, rig.FenceName, metav1.GetOptions{})
	require.NoError(t, err)
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	_, err = r.CS.NetworkingV1().NetworkPolicies(r.NS).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)

	// The first sandbox PATCH arms the proxy: the API server's answer on
	// that connection is replaced by a reset.
	cfg, proxy := kubetest.Proxied(t, r.Cfg)
	var patches atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/sandboxes/") && patches.Add(1) == 1 {
				proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			}
			return rt.RoundTrip(req)
		})
	})
	var l rig.Logs
	d, err := driver.New(cfg, "gw", []string{r.NS}, driver.WithLogger(l.Logger()))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	var actions []reconciler.ActionEvent
	rec := newReconciler(t, d, reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) { actions = append(actions, e) }}))
	stats, err = rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions)
	assert.EqualValues(t, 2, patches.Load(), "the cut patch was sent again")
	assert.Equal(t, 1, l.Count(staleWarning))
	assert.Equal(t, 1, l.Count(`"maybeAppliedByEarlierCopy"=true`), "the log says the earlier copy did it")
	require.Len(t, actions, 1)
	assert.Equal(t, reconciler.ActionSuspend, actions[0].Type)
	assert.NoError(t, actions[0].Err)
	rig.WaitPhase(t, setup, r.NS, "cut", driver.PhaseStopped)
	require.Eventually(t, func() bool { return len(staleEvents(t, r)) == 1 }, rig.Settle, 20*time.Millisecond, "the suspension's Event")
}
