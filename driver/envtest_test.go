package driver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/internal/kubetest"
	"github.com/kubewire/kubewire/internal/sandboxtest"
)

// The tests in this file run against a real kube-apiserver with the
// Sandbox CRD of agent-sandbox's own module, and agent-sandbox's own
// controller: the release in go.mod in this process (v1beta1), and the
// v0.4.6 binary (v1alpha1 only) as a process. A fake kubelet runs the pods.

// settle bounds waits for the controller; they end as soon as it acts.
const settle = 30 * time.Second

var agentPod = sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}}}

// rig is one API server with the real controller and a fake kubelet for
// one fresh namespace.
type rig struct {
	cfg     *rest.Config
	cs      kubernetes.Interface
	ns      string
	kubelet *kubetest.Kubelet
}

// currentRig runs agent-sandbox's controller of the go.mod release in
// process, against the package's API server.
func currentRig(t *testing.T) *rig {
	r := newRig(t, env.Config(t))
	sandboxtest.RunController(t, r.cfg, r.ns)
	return r
}

// legacyRig uses a second API server, with the v0.4.6 CRD (v1alpha1 only;
// it cannot share one with the v1beta1 CRD), and runs the v0.4.6
// controller binary against it.
func legacyRig(t *testing.T) *rig {
	env.Config(t) // skips or fails as the package's API server does
	binary, crd := sandboxtest.LegacyController(t)
	r := newRig(t, kubetest.Shared(crd).Config(t))
	sandboxtest.RunLegacyController(t, r.cfg, binary)
	return r
}

// rigs runs test against each release's controller.
func rigs(t *testing.T, test func(t *testing.T, r *rig)) {
	t.Run("v1beta1", func(t *testing.T) { test(t, currentRig(t)) })
	t.Run("v1alpha1 (v0.4.6)", func(t *testing.T) { test(t, legacyRig(t)) })
}

func newRig(t *testing.T, cfg *rest.Config) *rig {
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sandboxes-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &rig{cfg: cfg, cs: cs, ns: ns.Name, kubelet: kubetest.RunKubelet(t, cfg, ns.Name)}
}

// driver returns a driver for the rig's namespace whose requests go
// through counter, if not nil.
func (r *rig) driver(t *testing.T, counter *writes, opts ...driver.Option) *driver.Driver {
	cfg := rest.CopyConfig(r.cfg)
	if counter != nil {
		cfg.Wrap(counter.wrap)
	}
	d, err := driver.New(cfg, "gw", []string{r.ns}, opts...)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// waitPhase waits until the sandbox reaches want and returns it.
func waitPhase(t *testing.T, d *driver.Driver, ns, name string, want driver.Phase) driver.Sandbox {
	t.Helper()
	var got driver.Sandbox
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		got, err = d.Get(context.Background(), ns, name)
		require.NoError(c, err)
		assert.Equal(c, want, got.Phase)
	}, settle, 20*time.Millisecond, "sandbox %s/%s never reached %s", ns, name, want)
	return got
}

// lifecycle: create reaches Ready; Stop returns Stopping or Stopped and
// then reaches Stopped; start reaches Ready again; delete removes it.
func lifecycle(t *testing.T, r *rig, version string) {
	ctx := context.Background()
	d := r.driver(t, nil)
	s, err := d.Create(ctx, r.ns, "life", driver.CreateSpec{PodTemplate: agentPod})
	require.NoError(t, err)
	assert.Equal(t, version, s.Version)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	waitPhase(t, d, r.ns, "life", driver.PhaseReady)

	// Hold the pod's deletion, so that Stopping is observed for what it is.
	r.kubelet.Hold("life")
	s, err = d.Stop(ctx, r.ns, "life")
	require.NoError(t, err)
	assert.Contains(t, []driver.Phase{driver.PhaseStopping, driver.PhaseStopped}, s.Phase)
	assert.False(t, s.Running)
	require.Eventually(t, func() bool {
		pod, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, "life", metav1.GetOptions{})
		return err == nil && pod.DeletionTimestamp != nil
	}, settle, 20*time.Millisecond, "the controller deletes the pod")
	// Once the controller has observed the stop, the phase comes from
	// what it wrote, not from the intent alone.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = d.Get(ctx, r.ns, "life")
		require.NoError(c, err)
		assert.True(c, observed(s), "conditions of generation %d", s.Generation)
	}, settle, 20*time.Millisecond)
	assert.Equal(t, driver.PhaseStopping, s.Phase, "the pod is still terminating")
	if version == "v1beta1" {
		assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodTerminating, s.Reason)
	}
	r.kubelet.Release("life")
	waitPhase(t, d, r.ns, "life", driver.PhaseStopped)

	s, err = d.Start(ctx, r.ns, "life")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	waitPhase(t, d, r.ns, "life", driver.PhaseReady)

	require.NoError(t, d.Delete(ctx, r.ns, "life"))
	require.Eventually(t, func() bool {
		_, err := d.Get(ctx, r.ns, "life")
		return driver.KindOf(err) == driver.KindNotFound
	}, settle, 20*time.Millisecond)
}

// observed reports whether every condition describes s's generation.
func observed(s driver.Sandbox) bool {
	for _, c := range s.Conditions {
		if c.ObservedGeneration != s.Generation {
			return false
		}
	}
	return len(s.Conditions) > 0
}

func TestLifecycle(t *testing.T) {
	t.Run("v1beta1", func(t *testing.T) { lifecycle(t, currentRig(t), "v1beta1") })
	t.Run("v1alpha1 (v0.4.6)", func(t *testing.T) { lifecycle(t, legacyRig(t), "v1alpha1") })
}

// TestStartStuckIsRolledBack: a start the scheduler cannot place is
// Starting while it waits; past the bootstrap grace the reconciler
// suspends it (never deletes it).
func TestStartStuckIsRolledBack(t *testing.T) { rigs(t, startStuck) }

func startStuck(t *testing.T, r *rig) {
	ctx := context.Background()
	r.kubelet.Set("stuck", kubetest.PodUnschedulable)
	d := r.driver(t, nil)
	_, err := d.Create(ctx, r.ns, "stuck", driver.CreateSpec{PodTemplate: agentPod})
	require.NoError(t, err)
	var s driver.Sandbox
	// v0.5.6 mirrors the pod's PodScheduled; v0.4.x says only
	// DependenciesNotReady.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = d.Get(ctx, r.ns, "stuck")
		require.NoError(c, err)
		assert.Contains(c, []string{driver.ReasonUnschedulable, sandboxv1beta1.SandboxReasonDependenciesNotReady}, s.Reason)
		assert.True(c, observed(s))
	}, settle, 20*time.Millisecond)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	if s.Version == "v1beta1" {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s, err = d.Get(ctx, r.ns, "stuck")
			require.NoError(c, err)
			assert.Equal(c, driver.ReasonUnschedulable, s.Reason)
		}, settle, 20*time.Millisecond)
	}

	rec := newReconciler(t, d, driver.WithBootstrapGrace(time.Hour))
	stats, err := rec.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, stats.Actions, "within the grace period")

	// The start is older than a millisecond: past this grace.
	rec = newReconciler(t, d, driver.WithBootstrapGrace(time.Millisecond))
	stats, err = rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions)
	assert.Equal(t, 1, stats.Warnings)
	s = waitPhase(t, d, r.ns, "stuck", driver.PhaseStopped)
	assert.False(t, s.Running)
}

// TestPodNotOwnedStopFails: a pod of the sandbox's name that the sandbox
// does not own is never deleted by the controller; the stop cannot
// complete, and the driver says so instead of reporting Stopping forever.
func TestPodNotOwnedStopFails(t *testing.T) {
	r := currentRig(t)
	ctx := context.Background()
	_, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "squatted"},
		Spec:       agentPod.Spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	d := r.driver(t, nil)
	_, err = d.Create(ctx, r.ns, "squatted", driver.CreateSpec{PodTemplate: agentPod})
	require.NoError(t, err)
	_, err = d.Stop(ctx, r.ns, "squatted")
	require.NoError(t, err, "the controller has not yet seen the stop")
	s := waitPhase(t, d, r.ns, "squatted", driver.PhaseError)
	assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, s.Reason)
	_, err = d.Stop(ctx, r.ns, "squatted")
	assert.Equal(t, driver.KindPrecondition, driver.KindOf(err))
	assert.ErrorContains(t, err, "PodNotOwned")
}

// TestCRDRequiresPodTemplate: the real CRD rejects a sandbox without a
// container, which is why Create checks it before sending anything.
func TestCRDRequiresPodTemplate(t *testing.T) {
	cfg := env.Config(t)
	cs, err := versioned.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.AgentsV1beta1().Sandboxes("default").Create(context.Background(), &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "spec.podTemplate.spec.containers")
}

// writes counts the requests that change sandboxes, per sandbox name, at
// the driver's transport; fail, when set, answers instead of the server.
type writes struct {
	mu      sync.Mutex
	patches map[string]int
	applied map[string]int // sandbox PATCHes the API server applied (2xx)
	sending int            // sandbox PATCHes sent and not yet answered
	at      []time.Time    // when each sandbox PATCH was sent
	other   int            // every other request but a read, an Event or a Lease
	events  int
	fail    func(*http.Request) bool
}

func newWrites() *writes { return &writes{patches: map[string]int{}, applied: map[string]int{}} }

func (w *writes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		w.mu.Lock()
		fail := w.fail
		p := req.URL.Path
		switch {
		case req.Method == http.MethodGet:
		case strings.HasPrefix(p, "/apis/events.k8s.io/"):
			w.events++
		case strings.HasPrefix(p, "/apis/coordination.k8s.io/"):
			// Leader election renews and releases its Lease.
		case req.Method == http.MethodPatch && strings.Contains(p, "/sandboxes/"):
			w.patches[p[strings.LastIndex(p, "/")+1:]]++
			w.at = append(w.at, time.Now())
			w.sending++
			defer w.answered()
		default:
			w.other++
		}
		w.mu.Unlock()
		if fail != nil && fail(req) {
			return nil, &net503{}
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode < 300 && req.Method == http.MethodPatch && strings.Contains(p, "/sandboxes/") {
			w.mu.Lock()
			w.applied[p[strings.LastIndex(p, "/")+1:]]++
			w.mu.Unlock()
		}
		return resp, err
	})
}

// answered counts a sandbox PATCH out of sending; the count of what it
// applied is made before.
func (w *writes) answered() {
	w.mu.Lock()
	w.sending--
	w.mu.Unlock()
}

// settled waits until every sandbox PATCH sent has its answer counted. A
// sandbox seen in the state a PATCH gave it may still have that PATCH's
// answer on its way back: a count of what was applied is read after this.
func (w *writes) settled(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.sending == 0
	}, settle, 5*time.Millisecond, "sandbox PATCHes still unanswered")
}

// appliedReset returns the sandbox PATCHes the API server applied since
// the last call, and forgets them. A PATCH refused for a stale
// resourceVersion (409, when the controller wrote in between) is sent
// again, and counts once here.
func (w *writes) appliedReset() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.applied
	w.applied = map[string]int{}
	return out
}

func (w *writes) reset() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.patches
	w.patches = map[string]int{}
	w.at = nil
	out["(any other write)"] = w.other
	w.other = 0
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// net503 is a transport failure the test injects.
type net503 struct{}

func (*net503) Error() string { return "injected: connection refused" }

// seedRegression is the field report on the real controller: 3 suspended
// and 2 running sandboxes; the fence's generation moves; pass 1 writes
// once to each running sandbox and to no suspended one, with one Event per
// transition; passes 2 and 3 write nothing and warn about nothing.
func seedRegression(t *testing.T, r *rig) {
	ctx := context.Background()
	counter := newWrites()
	var l logs
	d := r.driver(t, counter, driver.WithLogger(l.logger()))
	names := []string{"run-0", "run-1", "sus-0", "sus-1", "sus-2"}
	for _, name := range names {
		_, err := d.Create(ctx, r.ns, name, driver.CreateSpec{PodTemplate: agentPod})
		require.NoError(t, err)
	}
	for _, name := range names {
		waitPhase(t, d, r.ns, name, driver.PhaseReady)
	}
	for _, name := range names[2:] {
		_, err := d.Stop(ctx, r.ns, name)
		require.NoError(t, err)
	}
	for _, name := range names[2:] {
		waitPhase(t, d, r.ns, name, driver.PhaseStopped)
	}
	rec := newReconciler(t, d)
	stats, err := rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, stats.Actions, "the running sandboxes' bootstrap marks are cleared")
	assert.Zero(t, stats.Warnings)

	// Change the fence's spec: the API server bumps its generation.
	np, err := r.cs.NetworkingV1().NetworkPolicies(r.ns).Get(ctx, driver.DefaultFenceName, metav1.GetOptions{})
	require.NoError(t, err)
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	np, err = r.cs.NetworkingV1().NetworkPolicies(r.ns).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, np.Generation)
	counter.reset()

	stats, err = rec.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, driver.PassStats{Seen: 5, Actions: 2, Warnings: 2, Duration: stats.Duration}, stats)
	assert.Equal(t, map[string]int{"run-0": 1, "run-1": 1, "(any other write)": 0}, counter.reset(), "pass 1: one write to each running sandbox")
	for pass := 2; pass <= 3; pass++ {
		stats, err = rec.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, driver.PassStats{Seen: 5, Duration: stats.Duration}, stats, "pass %d", pass)
		assert.Equal(t, map[string]int{"(any other write)": 0}, counter.reset(), "pass %d writes nothing", pass)
	}
	assert.Equal(t, 2, l.count(staleWarning), "one warning per transition")
	for _, name := range names[:2] {
		waitPhase(t, d, r.ns, name, driver.PhaseStopped)
	}

	// One Event per transition, through client-go's recorder.
	require.Eventually(t, func() bool { return len(staleEvents(t, r)) == 2 }, settle, 20*time.Millisecond)
	d.Close()
	for _, ev := range staleEvents(t, r) {
		assert.Contains(t, []string{"run-0", "run-1"}, ev.Regarding.Name)
		assert.Equal(t, "Sandbox", ev.Regarding.Kind)
		assert.Equal(t, corev1.EventTypeWarning, ev.Type)
		assert.Equal(t, "Suspend", ev.Action)
		assert.Nil(t, ev.Series, "a single occurrence, not a series")
	}
}

func staleEvents(t *testing.T, r *rig) []eventsv1.Event {
	list, err := r.cs.EventsV1().Events(r.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.ReportingController == driver.DefaultDriverName && ev.Reason == "StaleFence" {
			out = append(out, ev)
		}
	}
	return out
}

func TestSeedRegression(t *testing.T) { rigs(t, seedRegression) }

// TestUnreadableFence: when the fence cannot be read, the pass reports an
// error and writes nothing, though every sandbox runs under an old fence.
func TestUnreadableFence(t *testing.T) {
	r := currentRig(t)
	ctx := context.Background()
	counter := newWrites()
	d := r.driver(t, counter)
	for _, name := range []string{"a", "b"} {
		_, err := d.Create(ctx, r.ns, name, driver.CreateSpec{PodTemplate: agentPod})
		require.NoError(t, err)
	}
	require.NoError(t, r.cs.NetworkingV1().NetworkPolicies(r.ns).Delete(ctx, driver.DefaultFenceName, metav1.DeleteOptions{}))
	counter.reset()
	counter.mu.Lock()
	counter.fail = func(req *http.Request) bool { return strings.Contains(req.URL.Path, "/networkpolicies") }
	counter.mu.Unlock()

	stats, err := newReconciler(t, d).Pass(ctx)
	require.Error(t, err)
	assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
	assert.ErrorContains(t, err, "injected")
	assert.Equal(t, 1, stats.Errors)
	assert.Zero(t, stats.Actions)
	assert.Equal(t, map[string]int{"(any other write)": 0}, counter.reset(), "unknown is not absent: nothing written")
}

// TestOnePool: the driver's clientsets share one HTTP client, and so one
// pool and one connection. Through a config with a dialer of its own,
// which client-go does not share through its transport cache, each
// clientset had a pool and a connection of its own.
func TestOnePool(t *testing.T) {
	r := newRig(t, env.Config(t))
	cfg, proxy := kubetest.Proxied(t, r.cfg)
	d, err := driver.New(cfg, "gw", []string{r.ns})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	// A create reads the fence through the core clientset and writes
	// through the Sandbox one.
	_, err = d.Create(ctx, r.ns, "pooled", driver.CreateSpec{PodTemplate: agentPod})
	require.NoError(t, err)
	_, err = d.Get(ctx, r.ns, "pooled")
	require.NoError(t, err)
	assert.Equal(t, 1, proxy.Accepted(), "one connection for both clientsets")
}
