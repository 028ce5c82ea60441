package driver_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/internal/kubetest"
)

// TestFenceOnAPIServer: on a real API server, a change to the fence
// policy's spec bumps its generation; the next pass suspends the running
// sandbox once (one Event), and the suspended one keeps its resourceVersion
// across three passes.
func TestFenceOnAPIServer(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sandboxes-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ns := nsObj.Name

	var l logs
	d, err := driver.New(cfg, "gw", []string{ns}, driver.WithLogger(l.logger()))
	require.NoError(t, err)

	running, err := d.Create(ctx, ns, "running", driver.CreateSpec{PodTemplate: map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "agent", "image": "busybox"}}}}})
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStarting, running.Phase)
	assert.True(t, running.Running)
	assert.EqualValues(t, 1, running.Fence.Generation)
	_, err = d.Create(ctx, ns, "stopped", driver.CreateSpec{})
	require.NoError(t, err)
	_, err = d.Create(ctx, ns, "running", driver.CreateSpec{})
	assert.Equal(t, driver.KindAlreadyExists, driver.KindOf(err))

	kubetest.Controller(t, cfg, ns, "running")
	_, err = d.Stop(ctx, ns, "stopped")
	require.NoError(t, err)
	kubetest.Controller(t, cfg, ns, "stopped")

	got, err := d.Get(ctx, ns, "running")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseReady, got.Phase)
	stopped, err := d.Get(ctx, ns, "stopped")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStopped, stopped.Phase)

	r := driver.NewReconciler(d)
	stats, err := r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions, "the Ready sandbox's bootstrap mark is cleared")
	assert.Zero(t, stats.Warnings)
	stats, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, stats.Actions, "converged with the current fence")

	// Change the fence's spec: the API server bumps its generation.
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, driver.DefaultFenceName, metav1.GetOptions{})
	require.NoError(t, err)
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	np, err = cs.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, np.Generation)

	stopped, err = d.Get(ctx, ns, "stopped")
	require.NoError(t, err)
	rv := stopped.ResourceVersion

	stats, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions)
	assert.Equal(t, 1, stats.Warnings)
	got, err = d.Get(ctx, ns, "running")
	require.NoError(t, err)
	assert.False(t, got.Running, "the running sandbox was suspended: fail closed")

	for i := 0; i < 3; i++ {
		stats, err = r.Pass(ctx)
		require.NoError(t, err)
		assert.Zero(t, stats.Actions)
		assert.Zero(t, stats.Warnings)
	}
	stopped, err = d.Get(ctx, ns, "stopped")
	require.NoError(t, err)
	assert.Equal(t, rv, stopped.ResourceVersion, "the suspended sandbox was not written")
	assert.Equal(t, 1, l.count(staleWarning), "one warning for the one transition")

	events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=running,reason=StaleFence"})
	require.NoError(t, err)
	assert.Len(t, events.Items, 1)
	assert.Equal(t, corev1.EventTypeWarning, events.Items[0].Type)

	// Start re-admits it under the current fence; the reconciler agrees.
	started, err := d.Start(ctx, ns, "running")
	require.NoError(t, err)
	assert.EqualValues(t, 2, started.Fence.Generation)
	stats, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, stats.Warnings)

	list, err := d.List(ctx, ns)
	require.NoError(t, err)
	assert.Len(t, list, 2)

	require.NoError(t, d.Delete(ctx, ns, "running"))
	_, err = d.Get(ctx, ns, "running")
	assert.Equal(t, driver.KindNotFound, driver.KindOf(err))
}
