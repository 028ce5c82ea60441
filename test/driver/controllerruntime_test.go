package driver_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestControllerRuntimeUpdate: a controller-runtime client on a config
// kubeadapter.Apply'd with its defaults. An Update (which carries the
// object's resourceVersion) whose answer the proxy cuts after the API
// server applied it is sent again and refused with a conflict that says
// the earlier copy may have been applied, where a stack re-sending by
// method alone reported a bare conflict about the caller's own write. A
// Create whose answer is cut is sent once.
func TestControllerRuntimeUpdate(t *testing.T) {
	admin := rig.Config(t)
	cs, err := kubernetes.NewForConfig(admin)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cr-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, proxy := kubetest.Proxied(t, admin)
	var maybeApplied int
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Decision: func(d retry.Decision) {
		if d.Reason == retry.ReasonMaybeApplied {
			maybeApplied++
		}
	}})))
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	ctx := context.Background()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cr", Namespace: ns.Name}}
	require.NoError(t, c.Create(ctx, cm))
	cm.Data = map[string]string{"k": "v"}
	proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	// The first copy was applied, so the second is refused.
	err = c.Update(ctx, cm)
	require.Error(t, err, "the re-sent copy is refused")
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.Contains(t, err.Error(), "the earlier copy may have been applied")
	assert.Equal(t, 1, maybeApplied, "observed as maybe applied")
	got, err := cs.CoreV1().ConfigMaps(ns.Name).Get(ctx, "cr", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v"}, got.Data, "applied once")

	created := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cr-once", Namespace: ns.Name}}
	proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
	err = c.Create(ctx, created)
	var re *retry.Error
	require.ErrorAs(t, err, &re, "the cut create fails: %v", err)
	assert.Equal(t, retry.ReasonNotIdempotent, re.Reason)
	assert.Equal(t, 1, re.Attempts, "sent once")
}
