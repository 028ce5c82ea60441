package driver_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/internal/kubetest"
)

// lifecycle: create reaches Ready; Stop returns Stopping or Stopped and
// then reaches Stopped; start reaches Ready again; delete removes it.
func lifecycle(t *testing.T, r *drivertest.Rig, version string) {
	ctx := context.Background()
	d := r.Driver(t, nil)
	s, err := d.Create(ctx, r.NS, "life", driver.CreateSpec{PodTemplate: drivertest.AgentPod})
	require.NoError(t, err)
	assert.Equal(t, version, s.Version)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	drivertest.WaitPhase(t, d, r.NS, "life", driver.PhaseReady)

	// Hold the pod's deletion, so that Stopping is observed for what it is.
	r.Kubelet.Hold("life")
	s, err = d.Stop(ctx, r.NS, "life")
	require.NoError(t, err)
	assert.Contains(t, []driver.Phase{driver.PhaseStopping, driver.PhaseStopped}, s.Phase)
	assert.False(t, s.Running)
	require.Eventually(t, func() bool {
		pod, err := r.CS.CoreV1().Pods(r.NS).Get(ctx, "life", metav1.GetOptions{})
		return err == nil && pod.DeletionTimestamp != nil
	}, drivertest.Settle, 20*time.Millisecond, "the controller deletes the pod")
	// Once the controller has observed the stop, the phase comes from
	// what it wrote, not from the intent alone.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = d.Get(ctx, r.NS, "life")
		require.NoError(c, err)
		assert.True(c, drivertest.Observed(s), "conditions of generation %d", s.Generation)
	}, drivertest.Settle, 20*time.Millisecond)
	assert.Equal(t, driver.PhaseStopping, s.Phase, "the pod is still terminating")
	if version == "v1beta1" {
		assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodTerminating, s.Reason)
	}
	r.Kubelet.Release("life")
	drivertest.WaitPhase(t, d, r.NS, "life", driver.PhaseStopped)

	s, err = d.Start(ctx, r.NS, "life")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	drivertest.WaitPhase(t, d, r.NS, "life", driver.PhaseReady)

	require.NoError(t, d.Delete(ctx, r.NS, "life"))
	require.Eventually(t, func() bool {
		_, err := d.Get(ctx, r.NS, "life")
		return driver.KindOf(err) == driver.KindNotFound
	}, drivertest.Settle, 20*time.Millisecond)
}

func TestLifecycle(t *testing.T) {
	t.Run("v1beta1", func(t *testing.T) { lifecycle(t, drivertest.CurrentRig(t), "v1beta1") })
	t.Run("v1alpha1 (v0.4.6)", func(t *testing.T) { lifecycle(t, drivertest.LegacyRig(t), "v1alpha1") })
}

// TestPodNotOwnedStopFails: a pod of the sandbox's name that the sandbox
// does not own is never deleted by the controller; the stop cannot
// complete, and the driver says so instead of reporting Stopping forever.
func TestPodNotOwnedStopFails(t *testing.T) {
	r := drivertest.CurrentRig(t)
	ctx := context.Background()
	_, err := r.CS.CoreV1().Pods(r.NS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "squatted"},
		Spec:       drivertest.AgentPod.Spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	d := r.Driver(t, nil)
	_, err = d.Create(ctx, r.NS, "squatted", driver.CreateSpec{PodTemplate: drivertest.AgentPod})
	require.NoError(t, err)
	_, err = d.Stop(ctx, r.NS, "squatted")
	require.NoError(t, err, "the controller has not yet seen the stop")
	s := drivertest.WaitPhase(t, d, r.NS, "squatted", driver.PhaseError)
	assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, s.Reason)
	_, err = d.Stop(ctx, r.NS, "squatted")
	assert.Equal(t, driver.KindPrecondition, driver.KindOf(err))
	assert.ErrorContains(t, err, "PodNotOwned")
}

// TestCRDRequiresPodTemplate: the real CRD rejects a sandbox without a
// container, which is why Create checks it before sending anything.
func TestCRDRequiresPodTemplate(t *testing.T) {
	cfg := drivertest.Config(t)
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
	r := drivertest.NewRig(t, drivertest.Config(t))
	cfg, proxy := kubetest.Proxied(t, r.Cfg)
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	// A create reads the fence through the core clientset and writes
	// through the Sandbox one.
	_, err = d.Create(ctx, r.NS, "pooled", driver.CreateSpec{PodTemplate: drivertest.AgentPod})
	require.NoError(t, err)
	_, err = d.Get(ctx, r.NS, "pooled")
	require.NoError(t, err)
	assert.Equal(t, 1, proxy.Accepted(), "one connection for both clientsets")
}
