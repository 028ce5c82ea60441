package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
	"github.com/kubewire/kubewire/transport/transporttest"
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

// admitted creates n running sandboxes named prefix-i through d and waits
// until each is Ready.
func admitted(t *testing.T, r *rig.Rig, d *driver.Driver, prefix string, n int) []string {
	ctx := context.Background()
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		_, err := d.Create(ctx, r.NS, name, rig.AgentPod)
		require.NoError(t, err)
		names = append(names, name)
	}
	for _, name := range names {
		rig.WaitPhase(t, d, r.NS, name, driver.PhaseReady)
	}
	return names
}

// counted creates n running sandboxes like admitted and returns them with
// a driver of opts whose writes counter counts.
func counted(t *testing.T, r *rig.Rig, n int, opts ...driver.Option) ([]string, *rig.Writes, *driver.Driver) {
	names := admitted(t, r, r.Driver(t, nil), "sb", n)
	counter := rig.NewWrites()
	return names, counter, r.Driver(t, counter, opts...)
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
	}, rig.Settle, 20*time.Millisecond, "not every sandbox is %s", what)
}

func suspended(s driver.Sandbox) bool { return !s.Running }

// waitBootstrapped waits until no named sandbox of r's namespace has a
// bootstrap in progress: the reconciler clears the mark once a sandbox is
// Ready. The driver's view does not show the mark; the object does.
func waitBootstrapped(t *testing.T, r *rig.Rig, names []string) {
	t.Helper()
	cs, err := versioned.NewForConfig(r.Cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, name := range names {
			s, err := cs.AgentsV1beta1().Sandboxes(r.NS).Get(context.Background(), name, metav1.GetOptions{})
			if !assert.NoError(t, err) {
				return false
			}
			if _, ok := s.Annotations[rig.AnnBootstrap]; ok {
				return false
			}
		}
		return true
	}, rig.Settle, 20*time.Millisecond, "not every sandbox's bootstrap mark is cleared")
}

// The reconciler's log lines when a leadership term's workers start, and
// once they have stopped.
const (
	startedLeading = `"msg"="leading"`
	stoppedLeading = `"msg"="stopped leading"`
)

// terms counts the leadership terms l's reconciler has started.
func terms(l *rig.Logs) int { return l.Count(startedLeading) }

// leads reports whether l's reconciler is in a leadership term: its
// workers have started and not stopped.
func leads(l *rig.Logs) bool { return l.Count(startedLeading) > l.Count(stoppedLeading) }

// moveFence changes the fence's spec, so the API server bumps its
// generation, and returns when that happened.
func moveFence(t *testing.T, r *rig.Rig) time.Time {
	ctx := context.Background()
	np, err := r.CS.NetworkingV1().NetworkPolicies(r.NS).Get(ctx, rig.FenceName, metav1.GetOptions{})
	require.NoError(t, err)
	if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	} else {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	at := time.Now()
	_, err = r.CS.NetworkingV1().NetworkPolicies(r.NS).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	return at
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestRunFenceChange: a fence generation change makes every running
// sandbox of the namespace suspended, once each, with one Event each,
// driven by the fence's watch event, not by a period.
func TestRunFenceChange(t *testing.T) { scopes(t, runFenceChange) }

func runFenceChange(t *testing.T, cluster bool) {
	r := rig.Current(t)
	const n = 20
	names, counter, d := counted(t, r, n)
	rec := scoped(t, d, cluster, reconciler.WithPeriod(time.Hour))
	runReconciler(t, rec)
	waitBootstrapped(t, r, names)
	counter.Reset()

	changed := moveFence(t, r)
	waitFor(t, d, r.NS, names, "suspended", suspended)
	var lat []time.Duration
	for _, at := range counter.SentAt() {
		lat = append(lat, at.Sub(changed))
	}
	got := counter.Reset()
	require.Len(t, lat, n)
	for _, name := range names {
		assert.Equal(t, 1, got[name], "%s patched once", name)
	}
	t.Logf("fence update to PATCH, %d sandboxes: p50 %s, p99 %s, last %s", n, percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))
	require.Eventually(t, func() bool { return len(staleEvents(t, r)) == n }, rig.Settle, 20*time.Millisecond)
}

// TestFenceChangeAtDefaults: with the config a kubeconfig gives (QPS and
// Burst unset) and the reconciler's default options, 60 running sandboxes
// are suspended soon after a fence change: about 1 to 2 s here (logged).
// At client-go's default of 5 requests a second, burst 10, the 60 PATCHes
// alone cannot go out in less than 10 s however fast the machine, so that
// is the bound: it fails with client-side throttling on every run, and a
// shared, busy machine does not make it fail without (a 5 s bound did,
// at 6.3 s, while other test binaries were being built).
func TestFenceChangeAtDefaults(t *testing.T) {
	r := rig.Current(t)
	const n = 60
	watch := r.Driver(t, nil)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("sb-%d", i)
		_, err := watch.Create(context.Background(), r.NS, names[i], rig.AgentPod)
		require.NoError(t, err)
	}
	cfg := rest.CopyConfig(r.Cfg)
	cfg.QPS, cfg.Burst = 0, 0
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	rec := newReconciler(t, d)
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, rig.Settle, 10*time.Millisecond)

	changed := moveFence(t, r)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := watch.List(context.Background(), r.NS)
		require.NoError(c, err)
		running := 0
		for _, s := range list {
			if s.Running {
				running++
			}
		}
		assert.Len(c, list, n)
		assert.Zero(c, running, "running")
	}, rig.Settle, 10*time.Millisecond, "not every sandbox is suspended")
	took := time.Since(changed)
	t.Logf("%d sandboxes suspended %v after the fence change", n, took)
	assert.Less(t, took, 10*time.Second, "client-side throttling: 5 requests a second")
}

// TestRunSeedRegression: after the change settles, three resyncs write
// nothing to the suspended sandboxes and warn about nothing. The resync
// goes through the workers: each running sandbox's suspension is sent
// once, and the API server refuses none for a stale resourceVersion.
func TestRunSeedRegression(t *testing.T) { scopes(t, runSeedRegression) }

func runSeedRegression(t *testing.T, cluster bool) {
	r := rig.Current(t)
	plain := r.Driver(t, nil)
	names := admitted(t, r, plain, "sb", 5)
	for _, name := range names[2:] {
		_, err := plain.Stop(context.Background(), r.NS, name)
		require.NoError(t, err)
	}
	counter := rig.NewWrites()
	var l rig.Logs
	d := r.Driver(t, counter, driver.WithLogger(l.Logger()))
	m, reg := metrics(t)
	rec := scoped(t, d, cluster, reconciler.WithPeriod(time.Second), reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()))
	runReconciler(t, rec)
	waitBootstrapped(t, r, names[:2])
	counter.Settled(t)
	counter.Reset()
	counter.Refused()
	moveFence(t, r)
	waitFor(t, d, r.NS, names, "stopped", func(s driver.Sandbox) bool { return s.Phase == driver.PhaseStopped })
	counter.Settled(t)
	sent := counter.Reset()
	for _, name := range names[:2] {
		assert.Equal(t, 1, sent[name], "%s: one suspension PATCH sent", name)
	}
	for _, name := range names[2:] {
		assert.Zero(t, sent[name], "%s was already suspended", name)
	}

	// The regression check: each resync queues the five sandboxes (a
	// resync that decided beside the workers would add nothing), and
	// every one is worked off.
	resyncs, before := l.Count(resynced), scrape(t, reg)
	require.Eventually(t, func() bool {
		now := scrape(t, reg)
		return l.Count(resynced) >= resyncs+3 && now[mQueueAdds] >= before[mQueueAdds]+15 && now[mWorkDone] >= before[mWorkDone]+15
	}, rig.Settle, 20*time.Millisecond, "three resyncs hand every sandbox to a worker")
	counter.Settled(t)
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.Reset(), "three resyncs write nothing")
	assert.Zero(t, counter.Refused(), "no PATCH refused with 409: one sandbox is never with two workers")
	assert.Equal(t, 2, l.Count(staleWarning), "one warning per transition, none on resync")
}

// resynced is the reconciler's log line for each resync.
const resynced = "resync queued every cached sandbox"

// TestLeaderElection: two replicas on one API server; exactly one writes;
// when the leader stops, the other takes over and acts on a fence change
// made afterwards; no sandbox is patched twice for one transition. Who
// leads is read from each replica's log.
func TestLeaderElection(t *testing.T) { scopes(t, leaderElection) }

func leaderElection(t *testing.T, cluster bool) {
	r := rig.Current(t)
	plain := r.Driver(t, nil)
	lease := func(id string) reconciler.LeaderElection {
		return reconciler.LeaderElection{Namespace: r.NS, Name: "gw-reconciler", Identity: id, LeaseDuration: 5 * time.Second}
	}
	type replica struct {
		counter *rig.Writes
		logs    *rig.Logs
		rec     *reconciler.Reconciler
		stop    func()
	}
	var replicas []*replica
	for _, id := range []string{"a", "b"} {
		c, l := rig.NewWrites(), new(rig.Logs)
		rec := scoped(t, r.Driver(t, c, driver.WithLogger(l.Logger())), cluster, reconciler.WithPeriod(time.Hour), reconciler.WithLeaderElection(lease(id)))
		replicas = append(replicas, &replica{counter: c, logs: l, rec: rec, stop: runReconciler(t, rec)})
	}
	var leader, follower *replica
	require.Eventually(t, func() bool {
		for i, rp := range replicas {
			if leads(rp.logs) {
				leader, follower = rp, replicas[1-i]
				return true
			}
		}
		return false
	}, rig.Settle, 20*time.Millisecond)

	names := admitted(t, r, plain, "sb", 4)
	waitBootstrapped(t, r, names)
	// The bootstrap clears race agent-sandbox's controller, whose status
	// writes can make the API server refuse one (409) and the leader
	// decide again; the fence change races nothing but the leader itself.
	leader.counter.Settled(t)
	leader.counter.Reset()
	leader.counter.Refused()
	moveFence(t, r)
	waitFor(t, plain, r.NS, names, "suspended", suspended)
	assert.Zero(t, terms(follower.logs), "the follower never led")
	leader.counter.Settled(t)
	sent := leader.counter.Reset()
	for _, name := range names {
		assert.Equal(t, 1, sent[name], "the leader sent one suspension PATCH to %s", name)
	}
	assert.Zero(t, leader.counter.Refused(), "no PATCH refused with 409")
	assert.Equal(t, map[string]int{"(any other write)": 0}, follower.counter.Reset(), "the follower writes nothing")
	_, err := follower.rec.Pass(context.Background())
	assert.ErrorIs(t, err, reconciler.ErrBusy, "a follower's Pass would write beside the leader")

	leader.stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return leads(follower.logs) }, rig.Settle, 20*time.Millisecond, "the follower takes over")
	// The old leader released the lease once its workers had stopped
	// (client-go's ReleaseOnCancel): the follower need not wait for it to
	// expire. A follower tries every 2/15 of the lease duration, jittered
	// up to 2.2 times that, 0.3 of it; one that waits for the lease to
	// expire leads at least 13/15 of it after the leader's last renewal.
	took := time.Since(stopped)
	t.Logf("the follower leads %v after the leader stopped", took)
	assert.Less(t, took, lease("").LeaseDuration*3/4, "the follower waited for the lease to expire")
	assert.Equal(t, 1, leader.logs.Count(stoppedLeading), "the old leader's workers stopped")
	for _, name := range names {
		_, err := plain.Start(context.Background(), r.NS, name)
		require.NoError(t, err)
	}
	waitFor(t, plain, r.NS, names, "ready again", func(s driver.Sandbox) bool { return s.Phase == driver.PhaseReady })
	waitBootstrapped(t, r, names)
	follower.counter.Settled(t)
	follower.counter.Reset()
	follower.counter.Refused()
	moveFence(t, r)
	waitFor(t, plain, r.NS, names, "suspended again", suspended)
	follower.counter.Settled(t)
	sent = follower.counter.Reset()
	for _, name := range names {
		assert.Equal(t, 1, sent[name], "the new leader sent one suspension PATCH to %s", name)
	}
	assert.Zero(t, follower.counter.Refused(), "no PATCH refused with 409")
	assert.Equal(t, map[string]int{"(any other write)": 0}, leader.counter.Reset(), "the old leader writes nothing")
}

// TestLeaseReleasedAfterWorkers: a leader stopped while one of its
// workers is inside a write releases the lease only once that write is
// answered: the follower does not lead beside it. client-go's
// ReleaseOnCancel alone releases as soon as the term ends.
func TestLeaseReleasedAfterWorkers(t *testing.T) {
	r := rig.Current(t)
	plain := r.Driver(t, nil)
	lease := func(id string) reconciler.Option {
		return reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: r.NS, Name: "gw-reconciler", Identity: id, LeaseDuration: 5 * time.Second})
	}
	var armed sync.Once
	hold, held, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	cfg := rest.CopyConfig(r.Cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			select {
			case <-hold:
				if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/sandboxes/") {
					armed.Do(func() { close(held) })
					<-release // a write on the wire does not stop with its context
				}
			default:
			}
			return rt.RoundTrip(req)
		})
	})
	var la, lb rig.Logs
	a, err := driver.New(cfg, "gw", []string{r.NS}, driver.WithLogger(la.Logger()))
	require.NoError(t, err)
	t.Cleanup(a.Close)
	leader := newReconciler(t, a, reconciler.WithPeriod(time.Hour), lease("a"))
	stopLeader := runReconciler(t, leader)
	require.Eventually(t, func() bool { return leads(&la) }, rig.Settle, 20*time.Millisecond)
	follower := newReconciler(t, r.Driver(t, nil, driver.WithLogger(lb.Logger())), reconciler.WithPeriod(time.Hour), lease("b"))
	runReconciler(t, follower)

	names := admitted(t, r, plain, "sb", 1)
	waitBootstrapped(t, r, names)
	close(hold)
	moveFence(t, r)
	select {
	case <-held:
	case <-time.After(rig.Settle):
		t.Fatal("the leader sent no suspension")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stopLeader()
	}()
	assert.Never(t, func() bool { return leads(&lb) }, time.Second, 20*time.Millisecond, "the follower leads while the old leader's write is under way")
	assert.Zero(t, la.Count(stoppedLeading), "the old leader's worker is inside its write")
	close(release)
	<-stopped
	assert.Equal(t, 1, la.Count(stoppedLeading), "the old leader's workers stopped")
	require.Eventually(t, func() bool { return leads(&lb) }, rig.Settle, 20*time.Millisecond, "the follower takes over")
	waitFor(t, plain, r.NS, names, "suspended", suspended)
}

// TestLostLeaseStopsWorkers: a leader whose lease renewals fail (the API
// server still answers its reads) stops its workers before the lease
// expires, so that they never run beside the follower that takes over.
// client-go releases the lease before it ends the term's context, and its
// release waited for workers that only that context could stop: they ran
// on until the release gave up, a renew deadline later. The old leader
// logs "stopped leading" once its workers have stopped; the follower
// "leading" once it holds the lease.
func TestLostLeaseStopsWorkers(t *testing.T) {
	r := rig.Current(t)
	lease := func(id string) reconciler.Option {
		return reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: r.NS, Name: "gw-reconciler", Identity: id, LeaseDuration: 5 * time.Second})
	}
	var renewals atomic.Bool // fail the leader's lease writes
	cfg := rest.CopyConfig(r.Cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if renewals.Load() && req.Method == http.MethodPut && strings.HasPrefix(req.URL.Path, "/apis/coordination.k8s.io/") {
				return nil, errors.New("injected: the lease write did not get through")
			}
			return rt.RoundTrip(req)
		})
	})
	var la, lb rig.Logs
	a, err := driver.New(cfg, "gw", []string{r.NS}, driver.WithLogger(la.Logger()))
	require.NoError(t, err)
	t.Cleanup(a.Close)
	leader := newReconciler(t, a, reconciler.WithPeriod(time.Hour), lease("a"))
	runReconciler(t, leader)
	require.Eventually(t, func() bool { return leads(&la) }, rig.Settle, 20*time.Millisecond)
	follower := newReconciler(t, r.Driver(t, nil, driver.WithLogger(lb.Logger())), reconciler.WithPeriod(time.Hour), lease("b"))
	runReconciler(t, follower)

	renewals.Store(true)
	both := false
	require.Eventually(t, func() bool {
		// The follower first: a leader seen leading after it was seen
		// leading ran beside it.
		f := leads(&lb)
		both = both || f && leads(&la)
		return f
	}, rig.Settle, 10*time.Millisecond, "the follower takes over")
	assert.False(t, both, "the old leader's workers ran beside the new leader's")
	assert.False(t, leads(&la))
}

// TestWatchBreak: the connection under the informers is reset and new
// ones are refused, and the fence is deleted meanwhile. Once the informer
// lists again, the API server's answer (absent) is acted on: every
// running sandbox is suspended, once (one PATCH applied).
func TestWatchBreak(t *testing.T) { scopes(t, watchBreak) }

func watchBreak(t *testing.T, cluster bool) {
	r := rig.Current(t)
	names := admitted(t, r, r.Driver(t, nil), "sb", 3)
	u, err := url.Parse(r.Cfg.Host)
	require.NoError(t, err)
	proxy, err := transporttest.NewProxy(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	_, port, _ := net.SplitHostPort(proxy.Addr())
	viaProxy := *r
	viaProxy.Cfg = rest.CopyConfig(r.Cfg)
	viaProxy.Cfg.Host = "https://127.0.0.1:" + port
	counter := rig.NewWrites()
	d := viaProxy.Driver(t, counter)
	rec := scoped(t, d, cluster, reconciler.WithPeriod(time.Second))
	runReconciler(t, rec)
	plain := r.Driver(t, nil)
	waitBootstrapped(t, r, names)
	counter.Settled(t)
	counter.Reset()
	counter.Applied()

	proxy.SetFault(transporttest.ResetBeforeForward)
	proxy.ResetAll()
	require.NoError(t, r.CS.NetworkingV1().NetworkPolicies(r.NS).Delete(context.Background(), rig.FenceName, metav1.DeleteOptions{}))
	// The cache still shows the fence as it was, which suspends nothing;
	// no write could pass the proxy anyway. TestStaleFenceCacheReadAgain
	// is the test of a stale cache.

	proxy.SetFault(transporttest.NoFault)
	waitFor(t, plain, r.NS, names, "suspended", suspended)
	counter.Settled(t)
	// Applied, not sent: the sandbox cache may list again after the fence
	// cache, and a suspension guarded by a resourceVersion the agent-sandbox
	// controller has moved since is refused (409), read again and sent
	// again. That is the guard at work, not a second suspension.
	sent, refused, applied := counter.Reset(), counter.Refused(), counter.Applied()
	t.Logf("sandbox PATCHes sent %v, refused %d", sent, refused)
	for _, name := range names {
		assert.Equal(t, 1, applied[name], "%s suspended once after the re-list", name)
	}
}

// scopes runs test with the reconciler watching each namespace, and the
// whole cluster.
func scopes(t *testing.T, test func(t *testing.T, cluster bool)) {
	t.Run("namespaced", func(t *testing.T) { test(t, false) })
	t.Run("cluster", func(t *testing.T) { test(t, true) })
}

// scoped returns a reconciler of d that watches the whole cluster, or each
// namespace, whatever their count and the API server's answers.
func scoped(t *testing.T, d *driver.Driver, cluster bool, opts ...reconciler.Option) *reconciler.Reconciler {
	return newReconciler(t, d, append(opts, reconciler.WithClusterWatch(cluster))...)
}

// scopeName names the scope of a test's objects.
func scopeName(cluster bool) string {
	if cluster {
		return "cluster"
	}
	return "namespaced"
}

// TestRelist: after the connection under the informers breaks, and the
// API server answers their requests 500 meanwhile, each Sandbox informer
// lists again once: one list of the whole gateway when it watches the
// cluster, one per namespace otherwise; a fence informer lists at most
// once (client-go resumes a watch where it can). While they cannot,
// nothing is written, and the fence informers' failures reach the
// observers; once they have, a fence change is acted on. The
// fault is an answer, not a refused connection: client-go and the
// kubewire stack retry a GET whose connection failed, and an informer
// whose retries outlast the fault would resume its watch instead of
// listing; an answer reaches the informer at once.
func TestRelist(t *testing.T) { scopes(t, relist) }

func relist(t *testing.T, cluster bool) {
	const n, perNamespace = 12, 50 // more sandboxes than a list page
	gw := "relist-" + scopeName(cluster)
	cfg, namespaces := scaleRig(t, gw, n, perNamespace)
	u, err := url.Parse(cfg.Host)
	require.NoError(t, err)
	proxy, err := transporttest.NewProxy(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	_, port, _ := net.SplitHostPort(proxy.Addr())
	viaProxy := rest.CopyConfig(cfg)
	viaProxy.Host = "https://127.0.0.1:" + port
	var lists listCounter
	counter := rig.NewWrites()
	viaProxy.Wrap(func(rt http.RoundTripper) http.RoundTripper { return lists.wrap(counter.Wrap(rt)) })
	d, err := driver.New(viaProxy, gw, namespaces)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	var fenceWatchErrs atomic.Int64
	rec := scoped(t, d, cluster, reconciler.WithPeriod(time.Hour), reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) {
		if e.Err != nil && strings.Contains(e.Err.Error(), "watching the fences") {
			fenceWatchErrs.Add(1)
		}
	}}))
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, rig.Settle, 10*time.Millisecond)
	lists.reset()
	counter.Reset()

	per := 1
	if !cluster {
		per = n
	}
	// Every informer's watch breaks, and its next one fails: only then
	// does client-go list again; a watch that merely ended resumes.
	lists.refuse(true)
	proxy.ResetAll()
	require.Eventually(t, func() bool { return lists.failedInformers() == 2*per }, rig.Settle, 10*time.Millisecond, "every informer tries again")
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.Reset(), "nothing written while the caches cannot list")
	// client-go hands a fence informer's failed list or watch to its
	// watch error handler, which reports it to the observers.
	require.Eventually(t, func() bool { return fenceWatchErrs.Load() >= int64(per) }, rig.Settle, 10*time.Millisecond,
		"the fence informers' failures reach the observers")
	lists.refuse(false)

	// client-go's reflector backs off up to 30s between its attempts,
	// jittered up to twice that.
	require.Eventually(t, func() bool { return lists.done()["sandboxes"] == int64(per) }, 2*time.Minute, 10*time.Millisecond,
		"every Sandbox informer lists again: want %d, lists %v", per, &lists)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	moveFence(t, &rig.Rig{Cfg: cfg, CS: kube, NS: namespaces[0]})
	sent := map[string]int{}
	require.Eventually(t, func() bool {
		for name, n := range counter.Reset() {
			sent[name] += n
		}
		for i := 0; i < perNamespace; i++ {
			if sent[fmt.Sprintf("sb-%d", i)] == 0 {
				return false
			}
		}
		return true
	}, rig.Settle, 10*time.Millisecond, "the fence change is acted on")
	counter.Settled(t)
	for name, n := range counter.Reset() {
		sent[name] += n
	}
	for i := 0; i < perNamespace; i++ {
		assert.Equal(t, 1, sent[fmt.Sprintf("sb-%d", i)], "sb-%d suspended once", i)
	}
	// A fence informer whose watch can resume from where it was resumes
	// instead.
	got := lists.done()
	assert.Equal(t, int64(per), got["sandboxes"], "one list per Sandbox informer, no more")
	assert.LessOrEqual(t, got["networkpolicies"], int64(per), "at most one list per fence informer")
}

// listCounter counts, per resource, the lists that succeeded (a LIST's
// first page, or a watch that sends the initial state: client-go's
// watch-list), and which informers' list or watch requests failed. While
// refusing, it answers the informers' requests 500 itself.
type listCounter struct {
	refusing atomic.Bool

	mu     sync.Mutex
	lists  map[string]int64
	failed map[string]bool // by path: one per informer
}

// refuse sets whether the informers' requests are answered 500.
func (l *listCounter) refuse(on bool) { l.refusing.Store(on) }

func (l *listCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		resource := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
		q := req.URL.Query()
		informer := req.Method == http.MethodGet && (resource == "sandboxes" || resource == "networkpolicies")
		var resp *http.Response
		var err error
		if informer && l.refusing.Load() {
			resp = &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure",` +
					`"message":"injected: etcdserver: request timed out","reason":"InternalError","code":500}`))}
		} else {
			resp, err = rt.RoundTrip(req)
		}
		switch {
		case !informer:
		case err != nil, resp.StatusCode >= http.StatusInternalServerError:
			l.mu.Lock()
			if l.failed == nil {
				l.failed = map[string]bool{}
			}
			l.failed[req.URL.Path] = true
			l.mu.Unlock()
		case resp.StatusCode == http.StatusOK && q.Get("continue") == "" && (!watching(q) || q.Get("sendInitialEvents") == "true"):
			l.mu.Lock()
			if l.lists == nil {
				l.lists = map[string]int64{}
			}
			l.lists[resource]++
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *listCounter) String() string { return fmt.Sprint(l.done()) }

func watching(q url.Values) bool { return q.Get("watch") == "true" || q.Get("watch") == "1" }

// failedInformers returns how many informers had a request fail.
func (l *listCounter) failedInformers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failed)
}

func (l *listCounter) done() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.lists)
}

func (l *listCounter) reset() {
	l.mu.Lock()
	l.lists, l.failed = nil, nil
	l.mu.Unlock()
}

// TestClusterScopeServesItsNamespaces: a cluster-wide watch also sees the
// gateway's sandboxes and the fences of namespaces the driver does not
// serve; a fence change there touches nothing, and one in a served
// namespace suspends only its own sandboxes.
func TestClusterScopeServesItsNamespaces(t *testing.T) {
	cfg, namespaces := scaleRig(t, "served", 2, 3)
	served, other := namespaces[0], namespaces[1]
	d, err := driver.New(cfg, "served", []string{served})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	rec := scoped(t, d, true, reconciler.WithPeriod(time.Hour))
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, rig.Settle, 10*time.Millisecond)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	cs, err := versioned.NewForConfig(cfg)
	require.NoError(t, err)

	moveFence(t, &rig.Rig{Cfg: cfg, CS: kube, NS: other})
	moveFence(t, &rig.Rig{Cfg: cfg, CS: kube, NS: served})
	waitFor(t, d, served, []string{"sb-0", "sb-1", "sb-2"}, "suspended", suspended)
	list, err := cs.AgentsV1beta1().Sandboxes(other).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 3)
	for _, s := range list.Items {
		assert.NotEqual(t, sandboxv1beta1.SandboxOperatingModeSuspended, s.Spec.OperatingMode, "%s/%s is not the driver's to suspend", other, s.Name)
		assert.NotContains(t, s.Annotations, rig.AnnBootstrap)
	}
}
