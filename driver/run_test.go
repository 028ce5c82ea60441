package driver_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/internal/faultproxy"
)

// runReconciler runs rec until the test ends or stop is called.
func runReconciler(t *testing.T, rec *driver.Reconciler) (stop func()) {
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

// admitted creates n running sandboxes named prefix-i through d and waits
// until each is Ready.
func admitted(t *testing.T, r *rig, d *driver.Driver, prefix string, n int) []string {
	ctx := context.Background()
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		_, err := d.Create(ctx, r.ns, name, driver.CreateSpec{PodTemplate: agentPod})
		require.NoError(t, err)
		names = append(names, name)
	}
	for _, name := range names {
		waitPhase(t, d, r.ns, name, driver.PhaseReady)
	}
	return names
}

// counted creates n running sandboxes like admitted and returns them with
// a driver whose writes counter counts.
func counted(t *testing.T, r *rig, n int) ([]string, *writes, *driver.Driver) {
	names := admitted(t, r, r.driver(t, nil), "sb", n)
	counter := newWrites()
	return names, counter, r.driver(t, counter)
}

// waitFor waits until every named sandbox satisfies ok.
func waitFor(t *testing.T, d *driver.Driver, ns string, names []string, what string, ok func(driver.Sandbox) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, name := range names {
			s, err := d.Get(context.Background(), ns, name)
			if !assert.NoError(t, err) || !ok(s) {
				return false
			}
		}
		return true
	}, settle, 20*time.Millisecond, "not every sandbox is %s", what)
}

func bootstrapDone(s driver.Sandbox) bool { return s.BootstrapStarted.IsZero() }
func suspended(s driver.Sandbox) bool     { return !s.Running }

// moveFence changes the fence's spec, so the API server bumps its
// generation, and returns when that happened.
func moveFence(t *testing.T, r *rig) time.Time {
	ctx := context.Background()
	np, err := r.cs.NetworkingV1().NetworkPolicies(r.ns).Get(ctx, driver.DefaultFenceName, metav1.GetOptions{})
	require.NoError(t, err)
	if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	} else {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	at := time.Now()
	_, err = r.cs.NetworkingV1().NetworkPolicies(r.ns).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	return at
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestRunFenceChange: a fence generation change makes every running
// sandbox of the namespace suspended, once each, with one Event each,
// driven by the fence's watch event, not by a period.
func TestRunFenceChange(t *testing.T) {
	r := currentRig(t)
	const n = 20
	names, counter, d := counted(t, r, n)
	rec := newReconciler(t, d, driver.WithPeriod(time.Hour))
	runReconciler(t, rec)
	waitFor(t, d, r.ns, names, "admitted", bootstrapDone)
	counter.reset()

	changed := moveFence(t, r)
	waitFor(t, d, r.ns, names, "suspended", suspended)
	counter.mu.Lock()
	var lat []time.Duration
	for _, at := range counter.at {
		lat = append(lat, at.Sub(changed))
	}
	counter.mu.Unlock()
	got := counter.reset()
	require.Len(t, lat, n)
	for _, name := range names {
		assert.Equal(t, 1, got[name], "%s patched once", name)
	}
	t.Logf("fence update to PATCH, %d sandboxes: p50 %s, p99 %s, last %s", n, percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))
	require.Eventually(t, func() bool { return len(staleEvents(t, r)) == n }, settle, 20*time.Millisecond)
}

// TestRunSeedRegression: after the change settles, three resyncs write
// nothing to the suspended sandboxes and warn about nothing.
func TestRunSeedRegression(t *testing.T) {
	r := currentRig(t)
	plain := r.driver(t, nil)
	names := admitted(t, r, plain, "sb", 5)
	for _, name := range names[2:] {
		_, err := plain.Stop(context.Background(), r.ns, name)
		require.NoError(t, err)
	}
	counter := newWrites()
	var l logs
	d := r.driver(t, counter, driver.WithLogger(l.logger()))
	passes := make(chan driver.PassStats, 100)
	rec := newReconciler(t, d, driver.WithPeriod(time.Second), driver.WithObserver(func(s driver.PassStats) { passes <- s }))
	runReconciler(t, rec)
	waitFor(t, d, r.ns, names[:2], "admitted", bootstrapDone)
	counter.settled(t)
	counter.reset()
	counter.appliedReset()
	moveFence(t, r)
	waitFor(t, d, r.ns, names, "stopped", func(s driver.Sandbox) bool { return s.Phase == driver.PhaseStopped })
	// The resync runs beside the workers: both may send a running
	// sandbox's suspension from the same resourceVersion, and the API
	// server refuses the second (409). What it applied is counted.
	counter.settled(t)
	sent, applied := counter.reset(), counter.appliedReset()
	for _, name := range names[:2] {
		assert.Equal(t, 1, applied[name], "%s suspended once (%d PATCHes sent)", name, sent[name])
	}
	for _, name := range names[2:] {
		assert.Zero(t, sent[name], "%s was already suspended", name)
	}
	for len(passes) > 0 {
		<-passes
	}
	for i := 0; i < 3; i++ {
		stats := <-passes
		assert.Equal(t, 5, stats.Seen)
		assert.Zero(t, stats.Actions, "resync %d", i+1)
		assert.Zero(t, stats.Warnings, "resync %d", i+1)
	}
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.reset(), "three resyncs write nothing")
	assert.Equal(t, 2, l.count(staleWarning), "one warning per transition, none on resync")
}

// TestLeaderElection: two replicas on one API server; exactly one writes;
// when the leader stops, the other takes over and acts on a fence change
// made afterwards; no sandbox is patched twice for one transition.
func TestLeaderElection(t *testing.T) {
	r := currentRig(t)
	plain := r.driver(t, nil)
	lease := func(id string) driver.LeaderElection {
		return driver.LeaderElection{Namespace: r.ns, Name: "gw-reconciler", Identity: id,
			LeaseDuration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 100 * time.Millisecond}
	}
	type replica struct {
		counter *writes
		rec     *driver.Reconciler
		stop    func()
	}
	var replicas []*replica
	for _, id := range []string{"a", "b"} {
		c := newWrites()
		rec := newReconciler(t, r.driver(t, c), driver.WithPeriod(time.Hour), driver.WithLeaderElection(lease(id)))
		replicas = append(replicas, &replica{counter: c, rec: rec, stop: runReconciler(t, rec)})
	}
	var leader, follower *replica
	require.Eventually(t, func() bool {
		for i, rp := range replicas {
			if rp.rec.Leading() {
				leader, follower = rp, replicas[1-i]
				return true
			}
		}
		return false
	}, settle, 20*time.Millisecond)

	names := admitted(t, r, plain, "sb", 4)
	waitFor(t, plain, r.ns, names, "admitted", bootstrapDone)
	moveFence(t, r)
	waitFor(t, plain, r.ns, names, "suspended", suspended)
	assert.False(t, follower.rec.Leading())
	leader.counter.settled(t)
	sent, got := leader.counter.reset(), leader.counter.appliedReset()
	for _, name := range names {
		assert.GreaterOrEqual(t, got[name], 1, "the leader acted on %s", name)
		assert.LessOrEqual(t, got[name], 2, "%s: a bootstrap clear and a suspension at most (%d PATCHes sent)", name, sent[name])
	}
	assert.Equal(t, map[string]int{"(any other write)": 0}, follower.counter.reset(), "the follower writes nothing")
	_, err := follower.rec.Pass(context.Background())
	assert.ErrorContains(t, err, "does not hold the lease")

	leader.stop()
	require.Eventually(t, follower.rec.Leading, settle, 20*time.Millisecond, "the follower takes over")
	for _, name := range names {
		_, err := plain.Start(context.Background(), r.ns, name)
		require.NoError(t, err)
	}
	waitFor(t, plain, r.ns, names, "ready again", func(s driver.Sandbox) bool { return s.Phase == driver.PhaseReady && bootstrapDone(s) })
	follower.counter.settled(t)
	follower.counter.reset()
	follower.counter.appliedReset()
	moveFence(t, r)
	waitFor(t, plain, r.ns, names, "suspended again", suspended)
	follower.counter.settled(t)
	sent, got = follower.counter.reset(), follower.counter.appliedReset()
	for _, name := range names {
		assert.Equal(t, 1, got[name], "the new leader suspended %s once (%d PATCHes sent)", name, sent[name])
	}
	assert.Equal(t, map[string]int{"(any other write)": 0}, leader.counter.reset(), "the old leader writes nothing")
}

// TestWatchBreak: the connection under the informers is reset and new
// ones are refused; while the fence cannot be watched or listed it is
// unknown, even though it was deleted meanwhile, and nothing is written.
// Once the informer lists again, the API server's answer (absent) is acted
// on: every running sandbox is suspended.
func TestWatchBreak(t *testing.T) {
	r := currentRig(t)
	names := admitted(t, r, r.driver(t, nil), "sb", 3)
	u, err := url.Parse(r.cfg.Host)
	require.NoError(t, err)
	proxy, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	_, port, _ := net.SplitHostPort(proxy.Addr())
	viaProxy := *r
	viaProxy.cfg = rest.CopyConfig(r.cfg)
	viaProxy.cfg.Host = "https://127.0.0.1:" + port
	counter := newWrites()
	d := viaProxy.driver(t, counter)
	rec := newReconciler(t, d, driver.WithPeriod(time.Hour))
	runReconciler(t, rec)
	plain := r.driver(t, nil)
	waitFor(t, plain, r.ns, names, "admitted", bootstrapDone)
	counter.reset()

	proxy.SetFault(faultproxy.ResetBeforeForward)
	proxy.ResetAll()
	require.NoError(t, r.cs.NetworkingV1().NetworkPolicies(r.ns).Delete(context.Background(), driver.DefaultFenceName, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := rec.Pass(context.Background())
		return err != nil
	}, settle, 20*time.Millisecond, "the fence becomes unknown")
	_, err = rec.Pass(context.Background())
	assert.ErrorContains(t, err, "fence")
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.reset(), "nothing written while the fence is unknown")
	for _, name := range names {
		s, err := plain.Get(context.Background(), r.ns, name)
		require.NoError(t, err)
		assert.True(t, s.Running, "%s still runs", name)
	}

	proxy.SetFault(faultproxy.None)
	waitFor(t, plain, r.ns, names, "suspended", suspended)
	got := counter.reset()
	for _, name := range names {
		assert.Equal(t, 1, got[name], "%s suspended once after the re-list", name)
	}
}
