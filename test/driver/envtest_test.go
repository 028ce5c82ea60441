package driver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// observed reports whether the controller wrote conditions for the
// sandbox's current generation, and the generation. It reads the sandbox
// with a dynamic client, as it is stored, not through the driver.
func observed(ctx context.Context, r *rig.Rig, name string) (bool, int64, error) {
	dyn, err := dynamic.NewForConfig(r.Cfg)
	if err != nil {
		return false, 0, err
	}
	u, err := dyn.Resource(sandboxv1beta1.GroupVersion.WithResource("sandboxes")).Namespace(r.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, 0, err
	}
	gen := u.GetGeneration()
	conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return false, gen, err
	}
	for _, c := range conds {
		og, _, _ := unstructured.NestedInt64(c.(map[string]any), "observedGeneration")
		if og != gen {
			return false, gen, nil
		}
	}
	return len(conds) > 0, gen, nil
}

// sandboxPaths records the API versions of the sandbox requests a driver
// sends, so that a test sees which version the driver chose.
type sandboxPaths struct {
	mu       sync.Mutex
	versions map[string]bool
}

func (p *sandboxPaths) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if parts := strings.Split(req.URL.Path, "/"); req.Method == http.MethodPost && len(parts) > 6 && parts[1] == "apis" && parts[2] == "agents.x-k8s.io" && parts[6] == "sandboxes" {
			p.mu.Lock()
			p.versions[parts[3]] = true
			p.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// TestLifecycle: create reaches Ready; Stop returns Stopping or Stopped and
// then reaches Stopped; start reaches Ready again, and the sandbox never
// reads Stopped once its mode says Running, though the controller keeps
// the Suspended condition beside Ready (agent-sandbox's API doc: Ready is
// authoritative); delete removes it.
func TestLifecycle(t *testing.T) {
	r := rig.Current(t)
	ctx := context.Background()
	paths := &sandboxPaths{versions: map[string]bool{}}
	cfg := rest.CopyConfig(r.Cfg)
	cfg.Wrap(paths.wrap)
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	s, err := d.Create(ctx, r.NS, "life", rig.AgentPod)
	require.NoError(t, err)
	paths.mu.Lock()
	assert.Equal(t, map[string]bool{"v1beta1": true}, paths.versions, "the driver speaks v1beta1")
	paths.mu.Unlock()
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	rig.WaitPhase(t, d, r.NS, "life", driver.PhaseReady)

	// Hold the pod's deletion, so that Stopping is observed for what it is.
	r.Kubelet.Hold("life")
	s, err = d.Stop(ctx, r.NS, "life")
	require.NoError(t, err)
	assert.Contains(t, []driver.Phase{driver.PhaseStopping, driver.PhaseStopped}, s.Phase)
	assert.False(t, s.Running)
	require.Eventually(t, func() bool {
		pod, err := r.CS.CoreV1().Pods(r.NS).Get(ctx, "life", metav1.GetOptions{})
		return err == nil && pod.DeletionTimestamp != nil
	}, rig.Settle, 20*time.Millisecond, "the controller deletes the pod")
	// Once the controller has observed the stop, the phase comes from
	// what it wrote, not from the intent alone.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ok, gen, err := observed(ctx, r, "life")
		require.NoError(c, err)
		assert.True(c, ok, "conditions of generation %d", gen)
	}, rig.Settle, 20*time.Millisecond)
	s, err = d.Get(ctx, r.NS, "life")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStopping, s.Phase, "the pod is still terminating")
	assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodTerminating, s.Reason)
	r.Kubelet.Release("life")
	rig.WaitPhase(t, d, r.NS, "life", driver.PhaseStopped)

	s, err = d.Start(ctx, r.NS, "life")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	// Every phase read from the start to Ready: the Suspended condition
	// the stop left is never read as the live state.
	var seen []driver.Phase
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := d.Get(ctx, r.NS, "life")
		require.NoError(c, err)
		if len(seen) == 0 || seen[len(seen)-1] != got.Phase {
			seen = append(seen, got.Phase)
		}
		assert.Equal(c, driver.PhaseReady, got.Phase)
	}, rig.Settle, 5*time.Millisecond, "the started sandbox never reached Ready")
	assert.NotContains(t, seen, driver.PhaseStopped, "phases after the start: %v", seen)
	cs, err := versioned.NewForConfig(r.Cfg)
	require.NoError(t, err)
	sb, err := cs.AgentsV1beta1().Sandboxes(r.NS).Get(ctx, "life", metav1.GetOptions{})
	require.NoError(t, err)
	// What v0.5.4 and later write after a resume, beside Ready=True: the
	// condition stays, False. derive reads it only while the intent is
	// Suspended (TestPhase has v0.5.0-0.5.3's stale True).
	suspended := conditionOf(sb.Status.Conditions, sandboxv1beta1.SandboxConditionSuspended)
	require.NotNil(t, suspended, "the controller keeps the Suspended condition after a resume: %v", sb.Status.Conditions)
	assert.Equal(t, metav1.ConditionFalse, suspended.Status)
	assert.Equal(t, sandboxv1beta1.SandboxReasonNotSuspended, suspended.Reason)
	assert.Equal(t, sb.Generation, suspended.ObservedGeneration, "current, not stale")

	require.NoError(t, d.Delete(ctx, r.NS, "life"))
	require.Eventually(t, func() bool {
		_, err := d.Get(ctx, r.NS, "life")
		return driver.KindOf(err) == driver.KindNotFound
	}, rig.Settle, 20*time.Millisecond)
}

// conditionOf returns the condition of type t, or nil.
func conditionOf(conds []metav1.Condition, t sandboxv1beta1.ConditionType) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == string(t) {
			return &conds[i]
		}
	}
	return nil
}

// TestPodNotOwnedStopFails: a pod of the sandbox's name that the sandbox
// does not own is never deleted by the controller; the stop cannot
// complete, and the driver says so instead of reporting Stopping forever.
func TestPodNotOwnedStopFails(t *testing.T) {
	r := rig.Current(t)
	ctx := context.Background()
	_, err := r.CS.CoreV1().Pods(r.NS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "squatted"},
		Spec:       rig.AgentPod.Spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	d := r.Driver(t, nil)
	_, err = d.Create(ctx, r.NS, "squatted", rig.AgentPod)
	require.NoError(t, err)
	_, err = d.Stop(ctx, r.NS, "squatted")
	require.NoError(t, err, "the controller has not yet seen the stop")
	s := rig.WaitPhase(t, d, r.NS, "squatted", driver.PhaseError)
	assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, s.Reason)
	_, err = d.Stop(ctx, r.NS, "squatted")
	assert.Equal(t, driver.KindPrecondition, driver.KindOf(err))
	assert.ErrorContains(t, err, "PodNotOwned")
}

// TestCRDRequiresPodTemplate: the real CRD rejects a sandbox without a
// container, which is why Create checks it before sending anything.
func TestCRDRequiresPodTemplate(t *testing.T) {
	cfg := rig.Config(t)
	cs, err := versioned.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.AgentsV1beta1().Sandboxes("default").Create(context.Background(), &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "spec.podTemplate.spec.containers")
}

// TestOnePool: the driver's clientsets share one HTTP client, and so one
// pool and one connection. Through a config with a dialer of its own,
// which client-go does not share through its transport cache, each
// clientset had a pool and a connection of its own.
func TestOnePool(t *testing.T) {
	r := rig.New(t, rig.Config(t))
	cfg, proxy := kubetest.Proxied(t, r.Cfg)
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	// A create reads the fence through the core clientset and writes
	// through the Sandbox one.
	_, err = d.Create(ctx, r.NS, "pooled", rig.AgentPod)
	require.NoError(t, err)
	_, err = d.Get(ctx, r.NS, "pooled")
	require.NoError(t, err)
	assert.Equal(t, 1, proxy.Accepted(), "one connection for both clientsets")
}

// onRequest is a middleware that calls f with each request of method to
// a sandbox before the request goes on, and returns what f returns
// instead of sending it, if not nil.
func onRequest(method string, f func(req *http.Request, rt http.RoundTripper) (*http.Response, error)) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == method && strings.Contains(req.URL.Path, "/sandboxes/") {
				return f(req, rt)
			}
			return rt.RoundTrip(req)
		})
	}
}

// TestErrorKeepsChain: the API server stops answering a stop's PATCH (the
// proxy holds its bytes). The error keeps context.DeadlineExceeded, the
// timeout of the stack the caller applied, with its options, and the
// connection facts; the PATCH was retried, since Stop marks it
// idempotent.
func TestErrorKeepsChain(t *testing.T) {
	r := rig.New(t, rig.Config(t))
	ctx := context.Background()
	// Created through a driver of the default timeout: the API server can
	// take seconds over its first writes on a busy machine.
	_, err := r.Driver(t, nil).Create(ctx, r.NS, "held", rig.AgentPod)
	require.NoError(t, err)

	cfg, proxy := kubetest.Proxied(t, r.Cfg)
	// Below the stack, so that each attempt meets the fault.
	cfg.Wrap(onRequest(http.MethodPatch, func(req *http.Request, rt http.RoundTripper) (*http.Response, error) {
		proxy.SetFault(transporttest.Hold)
		return rt.RoundTrip(req)
	}))
	var patches atomic.Int32
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithTimeout(time.Second),
		kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: func(a pooltrace.Attempt) {
			if a.Method == http.MethodPatch {
				patches.Add(1)
			}
		}}),
	))
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	// Release what is held before the proxy closes.
	t.Cleanup(func() { proxy.SetFault(transporttest.NoFault) })
	// The stop's reads open the connection its PATCH reuses.
	_, err = d.Stop(ctx, r.NS, "held")
	require.Error(t, err)
	assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "driver: stop sandbox "+r.NS+"/held: unavailable: "), msg)
	assert.Contains(t, msg, "on connection reused after")
	assert.Contains(t, msg, "request timeout of 1s exceeded")
	assert.Contains(t, msg, "retry: PATCH failed after 3 attempts", "stop is marked idempotent, so its patch was retried")
	assert.EqualValues(t, 3, patches.Load(), "the caller's observer saw each attempt")
}

// TestDeleteGoneIsSuccess: the first DELETE runs but its answer is lost;
// the retried DELETE finds the sandbox gone, which is success.
func TestDeleteGoneIsSuccess(t *testing.T) {
	r := rig.New(t, rig.Config(t))
	cfg := rest.CopyConfig(r.Cfg)
	var mu sync.Mutex
	var answers []int
	cfg.Wrap(onRequest(http.MethodDelete, func(req *http.Request, rt http.RoundTripper) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		answers = append(answers, resp.StatusCode)
		if len(answers) > 1 {
			return resp, nil
		}
		// Executed; the answer is lost with the connection.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}))
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	_, err = d.Create(ctx, r.NS, "gone", rig.AgentPod)
	require.NoError(t, err)
	require.NoError(t, d.Delete(ctx, r.NS, "gone"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{http.StatusOK, http.StatusNotFound}, answers, "the delete, idempotent by its method, was retried and found the sandbox gone")
}

// TestDeleteSparesRecreated: a sandbox deleted and created again under
// the same name between the driver's read and its DELETE is not deleted:
// the API server refuses the DELETE's uid precondition.
func TestDeleteSparesRecreated(t *testing.T) {
	r := rig.New(t, rig.Config(t))
	cs, err := versioned.NewForConfig(r.Cfg)
	require.NoError(t, err)
	cfg := rest.CopyConfig(r.Cfg)
	var recreated atomic.Value
	cfg.Wrap(onRequest(http.MethodDelete, func(req *http.Request, rt http.RoundTripper) (*http.Response, error) {
		ctx := req.Context()
		client := cs.AgentsV1beta1().Sandboxes(r.NS)
		old, err := client.Get(ctx, "again", metav1.GetOptions{})
		if err == nil {
			err = client.Delete(ctx, "again", metav1.DeleteOptions{})
		}
		if err == nil {
			again := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "again", Labels: old.Labels}, Spec: old.Spec}
			again, err = client.Create(ctx, again, metav1.CreateOptions{})
			if err == nil {
				recreated.Store(again.UID)
			}
		}
		if err != nil {
			return nil, err
		}
		return rt.RoundTrip(req)
	}))
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	_, err = d.Create(ctx, r.NS, "again", rig.AgentPod)
	require.NoError(t, err)
	err = d.Delete(ctx, r.NS, "again")
	require.Error(t, err)
	assert.Equal(t, driver.KindPrecondition, driver.KindOf(err))
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	s, err := cs.AgentsV1beta1().Sandboxes(r.NS).Get(ctx, "again", metav1.GetOptions{})
	require.NoError(t, err, "the new sandbox stays")
	assert.Equal(t, recreated.Load(), s.UID)
}
