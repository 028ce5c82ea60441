package core

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// This file is the one place that knows the Sandbox API's fields: it turns
// a v1beta1 Sandbox into the driver's [Sandbox] view, and builds the
// objects and patches the driver sends.

func fromV1beta1(o *sandboxv1beta1.Sandbox) Sandbox {
	s := fromMeta(&o.ObjectMeta)
	// operatingMode defaults to Running.
	s.Running = o.Spec.OperatingMode != sandboxv1beta1.SandboxOperatingModeSuspended
	s.HasStatus = len(o.Status.Conditions) > 0
	s.Conditions = o.Status.Conditions
	return withPhase(s)
}

func fromMeta(m *metav1.ObjectMeta) Sandbox {
	s := Sandbox{
		Namespace:       m.Namespace,
		Name:            m.Name,
		UID:             m.UID,
		ResourceVersion: m.ResourceVersion,
		Generation:      m.Generation,
		Deleting:        m.DeletionTimestamp != nil,
	}
	ann := m.Annotations
	if uid := ann[AnnotationFenceUID]; uid != "" {
		if gen, err := strconv.ParseInt(ann[AnnotationFenceGeneration], 10, 64); err == nil {
			s.Fence = Fence{UID: types.UID(uid), Generation: gen}
		}
	}
	if t, err := time.Parse(time.RFC3339, ann[AnnotationBootstrap]); err == nil {
		s.BootstrapStarted = t
	}
	return s
}

func newV1beta1(meta metav1.ObjectMeta, tmpl sandboxv1beta1.PodTemplate) *sandboxv1beta1.Sandbox {
	o := &sandboxv1beta1.Sandbox{ObjectMeta: meta}
	o.Spec.PodTemplate = tmpl
	o.Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeRunning
	return o
}

// Patch is a JSON merge patch of a Sandbox. Nil fields
// are left out; a nil annotation value removes the annotation.
type Patch struct {
	Metadata patchMeta  `json:"metadata"`
	Spec     *patchSpec `json:"spec,omitempty"`
}

type patchMeta struct {
	// ResourceVersion guards the patch: the API server answers 409 if the
	// object changed since it was read.
	ResourceVersion string             `json:"resourceVersion"`
	Annotations     map[string]*string `json:"annotations,omitempty"`
}

type patchSpec struct {
	OperatingMode sandboxv1beta1.SandboxOperatingMode `json:"operatingMode,omitempty"`
}

// intent returns the spec patch that sets the running intent.
func intent(running bool) *patchSpec {
	if running {
		return &patchSpec{OperatingMode: sandboxv1beta1.SandboxOperatingModeRunning}
	}
	return &patchSpec{OperatingMode: sandboxv1beta1.SandboxOperatingModeSuspended}
}

// SuspendPatch sets the intent to stopped and ends any bootstrap.
func SuspendPatch() *Patch {
	return &Patch{
		Metadata: patchMeta{Annotations: map[string]*string{AnnotationBootstrap: nil}},
		Spec:     intent(false),
	}
}

// AdmitPatch records fence as the one the sandbox runs under, starts a
// bootstrap at now and sets the intent to running.
func AdmitPatch(fence Fence, now time.Time) *Patch {
	return &Patch{
		Metadata: patchMeta{Annotations: map[string]*string{
			AnnotationFenceUID:        ptr(string(fence.UID)),
			AnnotationFenceGeneration: ptr(strconv.FormatInt(fence.Generation, 10)),
			AnnotationBootstrap:       ptr(now.UTC().Format(time.RFC3339)),
		}},
		Spec: intent(true),
	}
}

// ClearBootstrapPatch removes the bootstrap mark.
func ClearBootstrapPatch() *Patch {
	return &Patch{Metadata: patchMeta{Annotations: map[string]*string{AnnotationBootstrap: nil}}}
}

func ptr[T any](v T) *T { return &v }
