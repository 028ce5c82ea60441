package reconciler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// liveFence is what the reconciler knows about a namespace's fence.
type liveFence struct {
	// known is false when the fence could not be read: nothing may be
	// decided from it.
	known bool
	// present is false when the API server said the policy does not exist.
	present bool
	fence   core.Fence
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

// name is the action's name in logs and metrics.
func (t ActionType) name() string {
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

// action is a decision for one sandbox.
type action struct {
	Type ActionType
	// Reason is the Kubernetes Event reason of a transition.
	Reason string
	// Message explains the decision.
	Message string
	// Warn says the action is a state transition worth one warning and one
	// Event. Only a transition warns; a converged sandbox never does.
	Warn bool
}

// decide returns what to do with sandbox s given the live fence of its
// namespace. It is pure: it reads nothing but its arguments. Its table is
// in the package doc.
func decide(s core.Sandbox, live liveFence, now time.Time, grace time.Duration) action {
	if s.Deleting || !live.known {
		return action{}
	}
	if !live.present || s.Fence != live.fence {
		if !s.Running || live.present && s.Fence.UID == live.fence.UID && s.Fence.Generation > live.fence.Generation {
			// Stopped: converged. Or admitted under a newer generation
			// than the one known here: this view of the fence is behind.
			return action{}
		}
		msg := "namespace workload fence generation changed; suspending stale boundary"
		if !live.present {
			msg = "namespace workload fence is missing; suspending unfenced sandbox"
		}
		return action{Type: ActionSuspend, Reason: "StaleFence", Message: msg, Warn: true}
	}
	if s.BootstrapStarted.IsZero() {
		return action{}
	}
	switch {
	case s.Phase == core.PhaseReady, s.Phase == core.PhaseFinished:
		return action{Type: ActionClearBootstrap}
	case s.Running && now.Sub(s.BootstrapStarted) > grace && (s.Phase == core.PhaseError || stuck(s)):
		return action{Type: ActionRollback, Reason: "BootstrapFailed", Message: fmt.Sprintf("sandbox did not start within the bootstrap grace period (%s: %s); suspending it", s.Reason, s.Message), Warn: true}
	}
	return action{}
}

// stuck reports whether the controller says, for the current generation,
// that the sandbox cannot become ready yet.
func stuck(s core.Sandbox) bool {
	return s.Phase == core.PhaseStarting && (s.Reason == sandboxv1beta1.SandboxReasonDependenciesNotReady || s.Reason == corev1.PodReasonUnschedulable)
}
