package driver

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// TestLean: the reconciler's cache entry gives the reconciler the same
// view as the whole object, less the conditions and labels it does not
// read, and keeps nothing else of it: no managedFields, no pod template, no
// other annotation.
func TestLean(t *testing.T) {
	started := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3,
			Labels: map[string]string{LabelManagedBy: DefaultDriverName, LabelGateway: "gw", "team": "a"},
			Annotations: map[string]string{
				AnnotationFenceUID: "fence-a", AnnotationFenceGeneration: "2", AnnotationBootstrap: started.Format(time.RFC3339),
				sandboxv1alpha1.SandboxPodNameAnnotation:           "adopted-pod",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 4096),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: &metav1.FieldsV1{Raw: bytes.Repeat([]byte("x"), 4096)}}},
			Finalizers:    []string{"agents.x-k8s.io/sandbox"},
		}
	}
	tmpl := sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox", Command: []string{strings.Repeat("y", 2048)}}}}}
	conds := []metav1.Condition{
		{Type: string(sandboxv1beta1.SandboxConditionReady), Status: metav1.ConditionFalse, Reason: sandboxv1beta1.SandboxReasonDependenciesNotReady, Message: "waiting for the pod", ObservedGeneration: 3},
	}
	beta := &sandboxv1beta1.Sandbox{ObjectMeta: meta()}
	beta.Spec.PodTemplate = tmpl
	beta.Status.Conditions = conds
	alpha := &sandboxv1alpha1.Sandbox{ObjectMeta: meta()}
	alpha.Spec.Replicas = new(int32)
	alpha.Spec.PodTemplate = sandboxv1alpha1.PodTemplate{Spec: tmpl.Spec}
	alpha.Status.Conditions = conds

	for _, o := range []any{beta, alpha} {
		want, ok := toView(o)
		require.True(t, ok)
		require.NotEmpty(t, want.Phase)
		want.Conditions, want.labels = nil, nil
		lean, err := core{}.Lean(o)
		require.NoError(t, err)
		e, ok := lean.(*cached)
		require.True(t, ok, "%T", lean)
		got, ok := core{}.View(e)
		require.True(t, ok)
		assert.Equal(t, want, got, "%T", o)
		assert.Equal(t, "team-a/sb", e.Namespace+"/"+e.Name)
		assert.Equal(t, "42", e.ResourceVersion)
		assert.Equal(t, "uid-sb", string(e.UID))
		again, err := core{}.Lean(e)
		require.NoError(t, err)
		assert.Same(t, e, again, "client-go may transform an object twice (watch-list)")
		assert.Equal(t, e, e.DeepCopyObject(), "a runtime.Object, as client-go's consistency checks need")
		assert.Empty(t, e.ManagedFields)
		assert.Empty(t, e.Annotations)
		assert.Empty(t, e.Labels)
		assert.Empty(t, e.Finalizers)
	}
	other := &corev1.Pod{}
	same, err := core{}.Lean(other)
	require.NoError(t, err)
	assert.Same(t, other, same, "anything else passes through")
}
