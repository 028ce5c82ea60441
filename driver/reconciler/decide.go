package reconciler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
)

// LiveFence is what the reconciler knows about a namespace's fence.
type LiveFence struct {
	// Known is false when the fence could not be read: nothing may be
	// decided from it.
	Known bool
	// Present is false when the API server said the policy does not exist.
	Present bool
	Fence   driver.Fence
}

// ActionType is what the reconciler does to one sandbox.
type ActionType int

const (
	// ActionNone: the sandbox is converged, or nothing is known that
	// justifies touching it.
	ActionNone ActionType = iota
	// ActionSuspend: an active sandbox runs outside the current fence;
	// suspend it (fail closed).
	ActionSuspend
	// ActionRollback: a bootstrap past its grace period that the controller
	// reports failed or stuck; suspend it. Never a delete.
	ActionRollback
	// ActionClearBootstrap: the sandbox became Ready (or Finished); drop
	// the bootstrap annotation so that a later failure is not taken for a
	// failed bootstrap.
	ActionClearBootstrap
)

func (t ActionType) String() string {
	switch t {
	case ActionSuspend:
		return "suspend"
	case ActionRollback:
		return "rollback"
	case ActionClearBootstrap:
		return "clear-bootstrap"
	}
	return "none"
}

// Action is a decision for one sandbox.
type Action struct {
	Type ActionType
	// Reason is the Kubernetes Event reason of a transition.
	Reason string
	// Message explains the decision.
	Message string
	// Warn says the action is a state transition worth one warning and one
	// Event. Only a transition warns; a converged sandbox never does.
	Warn bool
}

// Decide returns what to do with sandbox s given the live fence of its
// namespace. It is pure: it reads nothing but its arguments.
//
//	deleting                                              none
//	fence unknown (its read failed)                       none
//	intent running (running or bootstrapping), fence
//	absent or recorded pair differs                       suspend, warn
//	  but recorded generation newer than the live one     none: this view is behind
//	intent stopped (stopping or stopped), mismatch        none: converged or converging
//	bootstrapping, Ready or Finished                      clear-bootstrap
//	bootstrapping past grace, and the controller reports
//	it failed (Error) or stuck (DependenciesNotReady,
//	Unschedulable) for the current generation             rollback, warn
//	anything else                                         none
//
// A bootstrap whose conditions are stale (the controller has not observed
// it yet) is unknown, not stuck: it is never rolled back.
func Decide(s driver.Sandbox, live LiveFence, now time.Time, grace time.Duration) Action {
	if s.Deleting || !live.Known {
		return Action{}
	}
	if !live.Present || s.Fence != live.Fence {
		if !s.Running || live.Present && s.Fence.UID == live.Fence.UID && s.Fence.Generation > live.Fence.Generation {
			// Stopped: converged. Or admitted under a newer generation
			// than the one known here: this view of the fence is behind.
			return Action{}
		}
		msg := "namespace workload fence generation changed; suspending stale boundary"
		if !live.Present {
			msg = "namespace workload fence is missing; suspending unfenced sandbox"
		}
		return Action{Type: ActionSuspend, Reason: "StaleFence", Message: msg, Warn: true}
	}
	if s.BootstrapStarted.IsZero() {
		return Action{}
	}
	switch {
	case s.Phase == driver.PhaseReady, s.Phase == driver.PhaseFinished:
		return Action{Type: ActionClearBootstrap}
	case s.Running && now.Sub(s.BootstrapStarted) > grace && (s.Phase == driver.PhaseError || stuck(s)):
		return Action{Type: ActionRollback, Reason: "BootstrapFailed", Message: fmt.Sprintf("sandbox did not start within the bootstrap grace period (%s: %s); suspending it", s.Reason, s.Message), Warn: true}
	}
	return Action{}
}

// stuck reports whether the controller says, for the current generation,
// that the sandbox cannot become ready yet.
func stuck(s driver.Sandbox) bool {
	return s.Phase == driver.PhaseStarting && (s.Reason == sandboxv1beta1.SandboxReasonDependenciesNotReady || s.Reason == corev1.PodReasonUnschedulable)
}
