package driver

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Labels and annotations the driver puts on the sandboxes it owns.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelGateway   = "kubewire.io/gateway"
	// AnnotationFenceUID and AnnotationFenceGeneration record the fence
	// policy a sandbox was admitted under.
	AnnotationFenceUID        = "kubewire.io/fence-uid"
	AnnotationFenceGeneration = "kubewire.io/fence-generation"
	// AnnotationBootstrap records when a create or start began; it is
	// removed once the sandbox is Ready, or when it is stopped.
	AnnotationBootstrap = "kubewire.io/bootstrap-started"
)

// Phase is a sandbox's state as the driver reports it.
type Phase string

const (
	PhaseUnknown      Phase = "Unknown"
	PhaseProvisioning Phase = "Provisioning"
	PhaseStarting     Phase = "Starting"
	PhaseReady        Phase = "Ready"
	PhaseStopping     Phase = "Stopping"
	PhaseStopped      Phase = "Stopped"
	PhaseDeleting     Phase = "Deleting"
	PhaseError        Phase = "Error"
)

// Fence identifies a fence NetworkPolicy: the pair the API server assigns.
type Fence struct {
	UID        types.UID
	Generation int64
}

// IsZero reports whether f names no policy.
func (f Fence) IsZero() bool { return f.UID == "" }

// Condition is a status condition of a Sandbox.
type Condition struct {
	Type               string
	Status             string
	Reason             string
	ObservedGeneration int64
}

// Sandbox is the driver's view of a Sandbox resource.
type Sandbox struct {
	Namespace       string
	Name            string
	UID             types.UID
	ResourceVersion string
	Generation      int64
	// Running is the intent: spec.operatingMode Running (v1beta1) or
	// spec.replicas 1 (v1alpha1).
	Running  bool
	Deleting bool
	// Fence is the pair recorded at admission; zero if none was.
	Fence Fence
	// BootstrapStarted is when the last create or start began; zero when no
	// bootstrap is in progress.
	BootstrapStarted time.Time
	// HasStatus reports whether the resource has any status.
	HasStatus  bool
	Conditions []Condition
	Phase      Phase
}

// fromUnstructured reads a Sandbox of either served version.
func fromUnstructured(u *unstructured.Unstructured) Sandbox {
	s := Sandbox{
		Namespace:       u.GetNamespace(),
		Name:            u.GetName(),
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Generation:      u.GetGeneration(),
		Deleting:        u.GetDeletionTimestamp() != nil,
	}
	if mode, ok, _ := unstructured.NestedString(u.Object, "spec", "operatingMode"); ok {
		s.Running = mode != "Suspended"
	} else if replicas, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); ok {
		s.Running = replicas > 0
	} else {
		// v1beta1 defaults operatingMode to Running.
		s.Running = true
	}
	ann := u.GetAnnotations()
	if uid := ann[AnnotationFenceUID]; uid != "" {
		gen, err := strconv.ParseInt(ann[AnnotationFenceGeneration], 10, 64)
		if err == nil {
			s.Fence = Fence{UID: types.UID(uid), Generation: gen}
		}
	}
	if t, err := time.Parse(time.RFC3339, ann[AnnotationBootstrap]); err == nil {
		s.BootstrapStarted = t
	}
	if status, ok := u.Object["status"].(map[string]any); ok && len(status) > 0 {
		s.HasStatus = true
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		cond := Condition{}
		cond.Type, _ = m["type"].(string)
		cond.Status, _ = m["status"].(string)
		cond.Reason, _ = m["reason"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			cond.ObservedGeneration = g
		case float64:
			cond.ObservedGeneration = int64(g)
		}
		s.Conditions = append(s.Conditions, cond)
	}
	s.Phase = DerivePhase(s)
	return s
}

// condition returns the condition of type t that describes the current
// generation. A condition that records an observedGeneration other than
// metadata.generation is stale and ignored; one that records none is taken
// as current.
func (s Sandbox) condition(t string) (Condition, bool) {
	for _, c := range s.Conditions {
		if c.Type != t {
			continue
		}
		if c.ObservedGeneration != 0 && c.ObservedGeneration != s.Generation {
			return Condition{}, false
		}
		return c, true
	}
	return Condition{}, false
}

// DerivePhase derives a sandbox's phase; the first match wins:
//
//	deletionTimestamp set                           Deleting
//	bootstrap in progress, not Ready                Starting (intent running) or Stopping
//	Ready=True                                      Ready
//	Suspended=True                                  Stopped
//	Ready=False, reason SandboxSuspended            Stopping
//	Ready=False, DependenciesNotReady or
//	ReconcilerError                                 Provisioning
//	Ready=False, any other reason                   Error
//	no Ready condition                              Provisioning
//	no status                                       Unknown
//
// Ready is authoritative: a stale Suspended=True next to Ready=True (an old
// controller after a resume) does not make a sandbox Stopped. Conditions of
// an older generation are ignored.
func DerivePhase(s Sandbox) Phase {
	if s.Deleting {
		return PhaseDeleting
	}
	ready, hasReady := s.condition("Ready")
	suspended, hasSuspended := s.condition("Suspended")
	readyTrue := hasReady && ready.Status == "True"
	if !s.BootstrapStarted.IsZero() && !readyTrue && !failed(ready, hasReady) {
		if s.Running {
			return PhaseStarting
		}
		if !(hasSuspended && suspended.Status == "True") {
			return PhaseStopping
		}
	}
	switch {
	case readyTrue:
		return PhaseReady
	case hasSuspended && suspended.Status == "True":
		return PhaseStopped
	case hasReady && ready.Status == "False" && ready.Reason == "SandboxSuspended":
		return PhaseStopping
	case hasReady && ready.Status == "False" && (ready.Reason == "DependenciesNotReady" || ready.Reason == "ReconcilerError"):
		return PhaseProvisioning
	case hasReady && ready.Status == "False":
		return PhaseError
	case !s.HasStatus:
		return PhaseUnknown
	}
	return PhaseProvisioning
}

// failed reports whether a Ready condition says the sandbox failed.
func failed(ready Condition, ok bool) bool {
	if !ok || ready.Status != "False" {
		return false
	}
	switch ready.Reason {
	case "SandboxSuspended", "DependenciesNotReady", "ReconcilerError", "":
		return false
	}
	return true
}
