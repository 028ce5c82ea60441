package core

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// The Event recorder runs client-go's broadcaster.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLean: the reconciler's cache entry gives the reconciler the same
// view as the whole object, less the conditions and labels it does not
// read, and keeps nothing else of it: no managedFields, no pod template, no
// other annotation.
func TestLean(t *testing.T) {
	started := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3,
			Labels: map[string]string{LabelManagedBy: "kubewire-driver", LabelGateway: "gw", "team": "a"},
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
		want, ok := View(o)
		require.True(t, ok)
		require.NotEmpty(t, want.Phase)
		require.Equal(t, "adopted-pod", want.podName)
		want.Conditions, want.labels = nil, nil
		lean, err := Lean(o)
		require.NoError(t, err)
		e, ok := lean.(*cached)
		require.True(t, ok, "%T", lean)
		got, ok := View(e)
		require.True(t, ok)
		assert.Equal(t, want, got, "%T", o)
		assert.Equal(t, "team-a/sb", e.Namespace+"/"+e.Name)
		assert.Equal(t, "42", e.ResourceVersion)
		assert.Equal(t, "uid-sb", string(e.UID))
		again, err := Lean(e)
		require.NoError(t, err)
		assert.Same(t, e, again, "client-go may transform an object twice (watch-list)")
		assert.Equal(t, e, e.DeepCopyObject(), "a runtime.Object, as client-go's consistency checks need")
		assert.Empty(t, e.ManagedFields)
		assert.Empty(t, e.Annotations)
		assert.Empty(t, e.Labels)
		assert.Empty(t, e.Finalizers)
	}
	other := &corev1.Pod{}
	same, err := Lean(other)
	require.NoError(t, err)
	assert.Same(t, other, same, "anything else passes through")
	_, ok := View(other)
	assert.False(t, ok)
}

// TestView: what the driver reads from each version: the intent and its
// defaults, the fence and bootstrap annotations (ignored when malformed),
// the pod the controller tracks, the deletion.
func TestView(t *testing.T) {
	started := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	now := metav1.NewTime(started)
	meta := func(ann map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3, Annotations: ann}
	}
	fence := map[string]string{AnnotationFenceUID: "fence-a", AnnotationFenceGeneration: "2"}
	want := func(version string, running bool, f func(*Sandbox)) Sandbox {
		s := Sandbox{Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3, Version: version, Running: running, podName: "sb", Phase: PhaseUnknown}
		if f != nil {
			f(&s)
		}
		return s
	}
	beta := func(mode sandboxv1beta1.SandboxOperatingMode, m metav1.ObjectMeta) any {
		o := &sandboxv1beta1.Sandbox{ObjectMeta: m}
		o.Spec.OperatingMode = mode
		return o
	}
	alpha := func(replicas *int32, m metav1.ObjectMeta) any {
		o := &sandboxv1alpha1.Sandbox{ObjectMeta: m}
		o.Spec.Replicas = replicas
		return o
	}
	zero, one := int32(0), int32(1)
	deleting := meta(nil)
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name string
		give any
		want Sandbox
	}{
		{"v1beta1: operatingMode defaults to Running", beta("", meta(nil)), want("v1beta1", true, nil)},
		{"v1beta1: Running", beta(sandboxv1beta1.SandboxOperatingModeRunning, meta(nil)), want("v1beta1", true, nil)},
		{"v1beta1: Suspended", beta(sandboxv1beta1.SandboxOperatingModeSuspended, meta(nil)), want("v1beta1", false, nil)},
		{"v1alpha1: replicas default to 1", alpha(nil, meta(nil)), want("v1alpha1", true, nil)},
		{"v1alpha1: replicas 1", alpha(&one, meta(nil)), want("v1alpha1", true, nil)},
		{"v1alpha1: replicas 0", alpha(&zero, meta(nil)), want("v1alpha1", false, nil)},
		{"fence recorded", beta("", meta(fence)), want("v1beta1", true, func(s *Sandbox) { s.Fence = Fence{UID: "fence-a", Generation: 2} })},
		{"fence of v1alpha1", alpha(nil, meta(fence)), want("v1alpha1", true, func(s *Sandbox) { s.Fence = Fence{UID: "fence-a", Generation: 2} })},
		{"fence generation not a number: no fence", beta("", meta(map[string]string{AnnotationFenceUID: "fence-a", AnnotationFenceGeneration: "two"})), want("v1beta1", true, nil)},
		{"fence generation without uid: no fence", beta("", meta(map[string]string{AnnotationFenceGeneration: "2"})), want("v1beta1", true, nil)},
		{"bootstrap in progress", beta("", meta(map[string]string{AnnotationBootstrap: started.Format(time.RFC3339)})), want("v1beta1", true, func(s *Sandbox) {
			s.BootstrapStarted, s.Phase = started, PhaseStarting
		})},
		{"bootstrap mark malformed: none", beta("", meta(map[string]string{AnnotationBootstrap: "yesterday"})), want("v1beta1", true, nil)},
		{"adopted pod", alpha(&zero, meta(map[string]string{sandboxv1alpha1.SandboxPodNameAnnotation: "warm-1"})), want("v1alpha1", false, func(s *Sandbox) { s.podName = "warm-1" })},
		{"deleting", beta("", deleting), want("v1beta1", true, func(s *Sandbox) { s.Deleting, s.Phase = true, PhaseDeleting })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := View(tt.give)
			require.True(t, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestViewConditions: the conditions are kept, and the phase comes from
// them (the table of phases is TestPhaseV1beta1's).
func TestViewConditions(t *testing.T) {
	o := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", Generation: 2}}
	o.Status.Conditions = []metav1.Condition{
		cond(condSuspended, yes, sandboxv1beta1.SandboxReasonSuspendedPodTerminated, 2),
		{Type: string(condReady), Status: no, Reason: sandboxv1beta1.SandboxReasonSuspended, Message: "suspended", ObservedGeneration: 2},
	}
	o.Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeSuspended
	s, ok := View(o)
	require.True(t, ok)
	assert.True(t, s.HasStatus)
	assert.Equal(t, o.Status.Conditions, s.Conditions)
	assert.Equal(t, PhaseStopped, s.Phase)
	assert.Equal(t, sandboxv1beta1.SandboxReasonSuspendedPodTerminated, s.Reason)
}

// TestBuild: the objects Create sends. v1alpha1 gets the template through
// agent-sandbox's own conversion, and replicas 1.
func TestBuild(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "team-a", Name: "sb", Labels: map[string]string{LabelGateway: "gw"}}
	tmpl := sandboxv1beta1.PodTemplate{
		ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"app": "agent"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
	}
	beta := newV1beta1(meta, tmpl)
	assert.Equal(t, meta, beta.ObjectMeta)
	assert.Equal(t, tmpl, beta.Spec.PodTemplate)
	assert.Equal(t, sandboxv1beta1.SandboxOperatingModeRunning, beta.Spec.OperatingMode)

	alpha := newV1alpha1(meta, tmpl)
	assert.Equal(t, meta, alpha.ObjectMeta)
	require.NotNil(t, alpha.Spec.Replicas)
	assert.EqualValues(t, 1, *alpha.Spec.Replicas)
	assert.Equal(t, tmpl.Spec, alpha.Spec.PodTemplate.Spec)
	assert.Equal(t, map[string]string{"app": "agent"}, alpha.Spec.PodTemplate.ObjectMeta.Labels)

	for _, o := range []any{beta, alpha} {
		s, ok := View(o)
		require.True(t, ok)
		assert.True(t, s.Running, "%T is created running", o)
	}
}

// TestPatchBodies: the merge patches the driver sends, as JSON: the
// resourceVersion guard always, a nil annotation as null (removed), and
// the intent in the field of the version.
func TestPatchBodies(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	fence := Fence{UID: "fence-a", Generation: 2}
	tests := []struct {
		name string
		give *Patch
		want string
	}{
		{"suspend v1beta1", SuspendPatch("v1beta1"),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":null}},"spec":{"operatingMode":"Suspended"}}`},
		{"suspend v1alpha1", SuspendPatch("v1alpha1"),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":null}},"spec":{"replicas":0}}`},
		{"admit v1beta1", AdmitPatch("v1beta1", fence, now),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":"2026-12-02T00:00:00Z","kubewire.io/fence-generation":"2","kubewire.io/fence-uid":"fence-a"}},"spec":{"operatingMode":"Running"}}`},
		{"admit v1alpha1", AdmitPatch("v1alpha1", fence, now),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":"2026-12-02T00:00:00Z","kubewire.io/fence-generation":"2","kubewire.io/fence-uid":"fence-a"}},"spec":{"replicas":1}}`},
		{"clear bootstrap", ClearBootstrapPatch(),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":null}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.Metadata.ResourceVersion = "7"
			got, err := json.Marshal(tt.give)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
		})
	}
}

func TestLimit(t *testing.T) {
	tests := []struct {
		name    string
		qps     float64
		burst   int
		want    float64
		wantErr string
	}{
		{"positive", 50, 100, 50, ""},
		{"no bound", math.Inf(1), 1, float64(rate.Inf), ""},
		{"zero", 0, 1, 0, "opt qps must be positive, got 0"},
		{"negative", -1, 1, 0, "opt qps must be positive, got -1"},
		{"NaN", math.NaN(), 1, 0, "opt qps must be positive, got NaN"},
		{"no burst", 1, 0, 0, "opt burst must be at least 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Limit("opt", tt.qps, tt.burst)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			l := rate.NewLimiter(rate.Limit(got), tt.burst)
			assert.True(t, l.Allow(), "a limiter of %v allows its burst", got)
		})
	}
}
