package core

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Annotations the driver puts on the sandboxes it owns.
const (
	// AnnotationFenceUID and AnnotationFenceGeneration record the fence
	// policy a sandbox was admitted under.
	AnnotationFenceUID        = "kubewire.io/fence-uid"
	AnnotationFenceGeneration = "kubewire.io/fence-generation"
	// AnnotationBootstrap records when a create or start began; it is
	// removed once the sandbox is Ready or Finished, or when it is stopped.
	AnnotationBootstrap = "kubewire.io/bootstrap-started"
)

// Phase is a sandbox's state as the driver reports it.
type Phase string

// The phases; driver's docs explain them.
const (
	PhaseUnknown      Phase = "Unknown"
	PhaseProvisioning Phase = "Provisioning"
	PhaseStarting     Phase = "Starting"
	PhaseReady        Phase = "Ready"
	PhaseStopping     Phase = "Stopping"
	PhaseStopped      Phase = "Stopped"
	PhaseDeleting     Phase = "Deleting"
	PhaseFinished     Phase = "Finished"
	PhaseError        Phase = "Error"
)

// Fence identifies a fence NetworkPolicy: the pair the API server assigns.
type Fence struct {
	UID        types.UID
	Generation int64
}

// Sandbox is the driver's view of a Sandbox resource: what package driver
// reports (its fields' docs are driver.Sandbox's) and package reconciler
// decides from.
type Sandbox struct {
	Namespace       string
	Name            string
	UID             types.UID
	ResourceVersion string
	Generation      int64
	Running         bool
	Deleting        bool
	Fence           Fence
	// BootstrapStarted is when the last create or start began; zero when no
	// bootstrap is in progress.
	BootstrapStarted time.Time
	// HasStatus reports whether the controller has written any status.
	HasStatus  bool
	Conditions []metav1.Condition
	Phase      Phase
	Reason     string
	Message    string
}

// condition returns the condition of type t that describes the current
// generation. A condition that records an observedGeneration other than
// metadata.generation is stale: right after a stop or start every condition
// is, until the controller catches up. One that records none is taken as
// current.
func (s *Sandbox) condition(t sandboxv1beta1.ConditionType) *metav1.Condition {
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != string(t) {
			continue
		}
		if c.ObservedGeneration != 0 && c.ObservedGeneration != s.Generation {
			return nil
		}
		return c
	}
	return nil
}

// derive derives a sandbox's phase from its intent and the conditions the
// controller wrote for the current generation, by the table of
// docs/agent-sandbox.md in the repository; the first match wins. It is
// pure. The intent decides which conditions count, so that a lingering
// condition is never read as the live state: agent-sandbox keeps the
// Suspended condition after a resume (v0.5.0 to v0.5.3 with Status True).
// A reason the driver does not know is Unknown, never guessed into a
// failure or a success: the reconciler acts on neither. It returns the
// phase and the condition that decided it, if any.
func derive(s *Sandbox) (Phase, *metav1.Condition) {
	if s.Deleting {
		return PhaseDeleting, nil
	}
	bootstrapping := !s.BootstrapStarted.IsZero()
	if !s.HasStatus {
		if bootstrapping && s.Running {
			return PhaseStarting, nil
		}
		return PhaseUnknown, nil
	}
	ready := s.condition(sandboxv1beta1.SandboxConditionReady)
	suspended := s.condition(sandboxv1beta1.SandboxConditionSuspended)
	finished := s.condition(sandboxv1beta1.SandboxConditionFinished)
	if ready == nil && suspended == nil && finished == nil {
		if s.Running {
			return PhaseStarting, nil
		}
		return PhaseStopping, nil
	}
	if !s.Running {
		switch {
		case ready != nil && ready.Reason == sandboxv1beta1.SandboxReasonExpired:
			// An expired sandbox keeps only Ready current (v0.5.6).
			return PhaseFinished, ready
		case ready != nil && ready.Reason == reasonInvalidConfiguration:
			return PhaseError, ready
		case suspended == nil:
			return PhaseStopping, nil
		case suspended.Status == metav1.ConditionTrue:
			return PhaseStopped, suspended
		}
		switch suspended.Reason {
		case sandboxv1beta1.SandboxReasonSuspendedPodNotOwned:
			return PhaseError, suspended
		case sandboxv1beta1.SandboxReasonSuspendedPodTerminating, sandboxv1beta1.SandboxReasonSuspendedPodNotTerminated:
			return PhaseStopping, suspended
		}
		return PhaseUnknown, suspended
	}
	if ready != nil && ready.Status == metav1.ConditionTrue {
		return PhaseReady, ready
	}
	if finished != nil && finished.Status == metav1.ConditionTrue {
		switch finished.Reason {
		case sandboxv1beta1.SandboxReasonPodSucceeded:
			return PhaseFinished, finished
		case sandboxv1beta1.SandboxReasonPodFailed:
			return PhaseError, finished
		}
		return PhaseUnknown, finished
	}
	notYet := PhaseProvisioning
	if bootstrapping {
		notYet = PhaseStarting
	}
	if ready == nil {
		return notYet, nil
	}
	switch ready.Reason {
	case sandboxv1beta1.SandboxReasonPodSucceeded, sandboxv1beta1.SandboxReasonExpired:
		return PhaseFinished, ready
	case sandboxv1beta1.SandboxReasonPodFailed, sandboxv1beta1.SandboxReasonMultiplePods, reasonInvalidConfiguration:
		return PhaseError, ready
	case sandboxv1beta1.SandboxReasonDependenciesNotReady, reasonReconcilerError, sandboxv1beta1.SandboxReasonSuspended:
		// SandboxSuspended while the intent is running: the controller
		// has not yet started the pod again.
		if sched := s.condition(sandboxv1beta1.SandboxConditionPodScheduled); sched != nil &&
			sched.Status == metav1.ConditionFalse && sched.Reason == corev1.PodReasonUnschedulable {
			return notYet, sched
		}
		return notYet, ready
	}
	return PhaseUnknown, ready
}

// reasonReconcilerError is the Ready reason the controller sets when its
// reconcile failed; the releases the driver is tested on have no constant
// for it.
const reasonReconcilerError = "ReconcilerError"

// reasonInvalidConfiguration is the Ready reason the controller sets from
// v1.0.4 on (agent-sandbox's pull request 1630) when the API server
// rejects, as invalid, an object it derives from the Sandbox (a Service
// whose name, the Sandbox's, is over 63 characters; a pod template field
// the cluster does not know): it stops retrying, and only the user's
// change to the Sandbox (or a new one, for the name) can fix it. The
// condition's message carries the API server's words. The releases the
// driver is tested on have no constant for it.
const reasonInvalidConfiguration = "InvalidConfiguration"

// withPhase fills in s's phase and its explanation.
func withPhase(s Sandbox) Sandbox {
	p, c := derive(&s)
	s.Phase, s.Reason, s.Message = p, "", ""
	if c != nil {
		s.Reason, s.Message = c.Reason, c.Message
	}
	return s
}
