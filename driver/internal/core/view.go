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

const (
	PhaseUnknown      Phase = "Unknown"
	PhaseProvisioning Phase = "Provisioning"
	PhaseStarting     Phase = "Starting"
	PhaseReady        Phase = "Ready"
	PhaseStopping     Phase = "Stopping"
	PhaseStopped      Phase = "Stopped"
	PhaseDeleting     Phase = "Deleting"
	// PhaseFinished is terminal and not a failure: the pod succeeded, or
	// the sandbox expired and its object is retained.
	PhaseFinished Phase = "Finished"
	PhaseError    Phase = "Error"
)

// Fence identifies a fence NetworkPolicy: the pair the API server assigns.
type Fence struct {
	UID        types.UID
	Generation int64
}

// podState is what the driver knows of a stopped v1alpha1 sandbox's pod.
// Controllers up to v0.4.x report Ready=True for a sandbox with replicas 0
// whether or not its pod is still terminating, so only the pod itself tells
// Stopping from Stopped.
type podState int

const (
	// podNotChecked: the pod was not looked up (not needed, or v1beta1).
	podNotChecked podState = iota
	// podPresent: the sandbox's pod still exists.
	podPresent
	// podAbsent: the API server says the sandbox's pod does not exist.
	podAbsent
	// podNotOwned: a pod of that name exists but the sandbox does not own
	// it; the controller will not delete it, so the stop cannot complete.
	podNotOwned
)

// Sandbox is the driver's view of a Sandbox resource of either served
// version: what package driver reports and package reconciler decides
// from.
type Sandbox struct {
	Namespace       string
	Name            string
	UID             types.UID
	ResourceVersion string
	Generation      int64
	// Version is the API version the sandbox was read through: v1beta1,
	// or v1alpha1 on agent-sandbox releases before v0.5.0.
	Version string
	// Running is the intent: spec.operatingMode Running (v1beta1) or
	// spec.replicas 1 (v1alpha1).
	Running  bool
	Deleting bool
	// Fence is the pair recorded at admission; zero if none was.
	Fence Fence
	// BootstrapStarted is when the last create or start began; zero when no
	// bootstrap is in progress.
	BootstrapStarted time.Time
	// HasStatus reports whether the controller has written any status.
	HasStatus  bool
	Conditions []metav1.Condition
	// Phase is derived from the intent and the conditions the controller
	// wrote for the current generation; see the package doc.
	Phase Phase
	// Reason and Message explain Phase: the reason and message of the
	// current condition it was derived from, for example PodNotOwned for a
	// stop that cannot complete. Empty when the phase comes from intent
	// alone (the controller has not yet observed the last change).
	Reason  string
	Message string

	labels  map[string]string
	podName string
	// pod is checked only for a stopped v1alpha1 sandbox.
	pod podState
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

// derive derives a sandbox's phase from its intent and the conditions
// the controller wrote for the current generation. It is pure. The first
// match wins:
//
//	deletionTimestamp set                                   Deleting
//	no status, bootstrap in progress                        Starting
//	no status                                               Unknown
//	no current condition (the controller has not observed
//	the last stop or start)                                 Starting or Stopping, by intent
//
//	intent stopped:
//	  Suspended=True (v0.5+)                                Stopped
//	  Suspended=False, PodNotOwned (the stop cannot finish) Error
//	  other Suspended                                       Stopping
//	  Ready=False SandboxExpired                            Finished
//	  no Suspended (v0.4.x, v1alpha1): pod gone             Stopped
//	  no Suspended, a pod the sandbox does not own          Error (PodNotOwned)
//	  no Suspended, pod present or not checked              Stopping
//
//	intent running:
//	  Ready=True                                            Ready
//	  Finished=True PodSucceeded, Ready=False PodSucceeded
//	  or SandboxExpired                                     Finished
//	  Finished=True PodFailed, Ready=False PodFailed or
//	  MultiplePods                                          Error
//	  not ready yet (DependenciesNotReady, ReconcilerError,
//	  no Ready), bootstrap in progress                      Starting
//	  not ready yet, no bootstrap                           Provisioning
//	  Ready=False, any other reason                         Error
//
// Ready is authoritative while running: a stale Suspended=True next to
// Ready=True (v0.5.0 to v0.5.3 after a resume) does not make a sandbox
// Stopped. While stopped it is not: v0.4.x reports Ready=True for replicas 0.
// It returns the phase and the condition that decided it, if any.
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
		case suspended != nil && suspended.Status == metav1.ConditionTrue:
			return PhaseStopped, suspended
		case suspended != nil && suspended.Reason == sandboxv1beta1.SandboxReasonSuspendedPodNotOwned:
			return PhaseError, suspended
		case suspended != nil:
			return PhaseStopping, suspended
		case s.pod == podAbsent:
			return PhaseStopped, nil
		case s.pod == podNotOwned:
			return PhaseError, &podNotOwnedCondition
		}
		return PhaseStopping, nil
	}
	if ready != nil && ready.Status == metav1.ConditionTrue {
		return PhaseReady, ready
	}
	if finished != nil && finished.Status == metav1.ConditionTrue {
		if finished.Reason == sandboxv1beta1.SandboxReasonPodSucceeded {
			return PhaseFinished, finished
		}
		return PhaseError, finished
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
	case sandboxv1beta1.SandboxReasonDependenciesNotReady, reasonReconcilerError, sandboxv1beta1.SandboxReasonSuspended:
		// SandboxSuspended while the intent is running: the controller
		// has not yet started the pod again.
		if sched := s.condition(sandboxv1beta1.SandboxConditionPodScheduled); sched != nil &&
			sched.Status == metav1.ConditionFalse && sched.Reason == corev1.PodReasonUnschedulable {
			return notYet, sched
		}
		return notYet, ready
	}
	return PhaseError, ready
}

// reasonReconcilerError is the Ready reason the controller sets when its
// reconcile failed; agent-sandbox has no constant for it.
const reasonReconcilerError = "ReconcilerError"

// podNotOwnedCondition explains a v1alpha1 stop that cannot complete, in the words
// v0.5+ controllers use for it.
var podNotOwnedCondition = metav1.Condition{
	Reason:  sandboxv1beta1.SandboxReasonSuspendedPodNotOwned,
	Message: "a pod of the sandbox's name exists that the sandbox does not own; the controller will not delete it",
}

// withPhase fills in s's phase and its explanation.
func withPhase(s Sandbox) Sandbox {
	p, c := derive(&s)
	s.Phase, s.Reason, s.Message = p, "", ""
	if c != nil {
		s.Reason, s.Message = c.Reason, c.Message
	}
	return s
}
