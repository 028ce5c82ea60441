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
	o := &sandboxv1beta1.Sandbox{ObjectMeta: meta()}
	o.Spec.PodTemplate = tmpl
	o.Status.Conditions = conds

	want, ok := View(o)
	require.True(t, ok)
	require.NotEmpty(t, want.Phase)
	want.Conditions = nil
	lean, err := Lean(o)
	require.NoError(t, err)
	e, ok := lean.(*cached)
	require.True(t, ok, "%T", lean)
	got, ok := View(e)
	require.True(t, ok)
	assert.Equal(t, want, got)
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
	other := &corev1.Pod{}
	same, err := Lean(other)
	require.NoError(t, err)
	assert.Same(t, other, same, "anything else passes through")
	_, ok = View(other)
	assert.False(t, ok)
}

// TestView: what the driver reads from a Sandbox: the intent and its
// default, the fence and bootstrap annotations (ignored when malformed),
// the deletion.
func TestView(t *testing.T) {
	started := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	now := metav1.NewTime(started)
	meta := func(ann map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3, Annotations: ann}
	}
	fence := map[string]string{AnnotationFenceUID: "fence-a", AnnotationFenceGeneration: "2"}
	want := func(running bool, f func(*Sandbox)) Sandbox {
		s := Sandbox{Namespace: "team-a", Name: "sb", UID: "uid-sb", ResourceVersion: "42", Generation: 3, Running: running, Phase: PhaseUnknown}
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
	deleting := meta(nil)
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name string
		give any
		want Sandbox
	}{
		{"operatingMode defaults to Running", beta("", meta(nil)), want(true, nil)},
		{"Running", beta(sandboxv1beta1.SandboxOperatingModeRunning, meta(nil)), want(true, nil)},
		{"Suspended", beta(sandboxv1beta1.SandboxOperatingModeSuspended, meta(nil)), want(false, nil)},
		{"fence recorded", beta("", meta(fence)), want(true, func(s *Sandbox) { s.Fence = Fence{UID: "fence-a", Generation: 2} })},
		{"fence generation not a number: no fence", beta("", meta(map[string]string{AnnotationFenceUID: "fence-a", AnnotationFenceGeneration: "two"})), want(true, nil)},
		{"fence generation without uid: no fence", beta("", meta(map[string]string{AnnotationFenceGeneration: "2"})), want(true, nil)},
		{"bootstrap in progress", beta("", meta(map[string]string{AnnotationBootstrap: started.Format(time.RFC3339)})), want(true, func(s *Sandbox) {
			s.BootstrapStarted, s.Phase = started, PhaseStarting
		})},
		{"bootstrap mark malformed: none", beta("", meta(map[string]string{AnnotationBootstrap: "yesterday"})), want(true, nil)},
		{"deleting", beta("", deleting), want(true, func(s *Sandbox) { s.Deleting, s.Phase = true, PhaseDeleting })},
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
// them (the table of phases is TestPhase's).
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

// TestBuild: the object Create sends, created running.
func TestBuild(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "team-a", Name: "sb", Labels: map[string]string{LabelGateway: "gw"}}
	tmpl := sandboxv1beta1.PodTemplate{
		ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"app": "agent"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
	}
	o := newV1beta1(meta, tmpl)
	assert.Equal(t, meta, o.ObjectMeta)
	assert.Equal(t, tmpl, o.Spec.PodTemplate)
	assert.Equal(t, sandboxv1beta1.SandboxOperatingModeRunning, o.Spec.OperatingMode)

	s, ok := View(o)
	require.True(t, ok)
	assert.True(t, s.Running)
}

// TestPatchBodies: the merge patches the driver sends, as JSON: the
// resourceVersion guard always, a nil annotation as null (removed), and
// the intent in spec.operatingMode.
func TestPatchBodies(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	fence := Fence{UID: "fence-a", Generation: 2}
	tests := []struct {
		name string
		give *Patch
		want string
	}{
		{"suspend", SuspendPatch(),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":null}},"spec":{"operatingMode":"Suspended"}}`},
		{"admit", AdmitPatch(fence, now),
			`{"metadata":{"resourceVersion":"7","annotations":{"kubewire.io/bootstrap-started":"2026-12-02T00:00:00Z","kubewire.io/fence-generation":"2","kubewire.io/fence-uid":"fence-a"}},"spec":{"operatingMode":"Running"}}`},
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
