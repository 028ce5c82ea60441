package driver

import "time"

// LiveFence is what a reconcile pass knows about a namespace's fence.
type LiveFence struct {
	// Known is false when the fence could not be read: nothing may be
	// decided from it.
	Known bool
	// Present is false when the API server said the policy does not exist.
	Present bool
	Fence   Fence
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
	// ActionRollback: a bootstrap past its grace period that the API server
	// reported failed; suspend it. Never a delete.
	ActionRollback
	// ActionClearBootstrap: the sandbox became Ready; drop the bootstrap
	// annotation so that a later failure is not taken for a failed
	// bootstrap.
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
// namespace. It is pure: the same inputs give the same action.
//
//	deleting                                              none
//	fence unknown (its read failed)                       none
//	intent running (running or bootstrapping), fence
//	absent or recorded pair differs                       suspend, warn
//	intent suspended (stopping or stopped), mismatch      none: converged or converging
//	bootstrapping, Ready                                  clear-bootstrap
//	bootstrapping past grace, API says Error              rollback, warn
//	anything else                                         none
func Decide(s Sandbox, live LiveFence, now time.Time, grace time.Duration) Action {
	if s.Deleting || !live.Known {
		return Action{}
	}
	if !live.Present || s.Fence != live.Fence {
		if !s.Running {
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
	case s.Phase == PhaseReady:
		return Action{Type: ActionClearBootstrap}
	case s.Running && s.Phase == PhaseError && now.Sub(s.BootstrapStarted) > grace:
		return Action{Type: ActionRollback, Reason: "BootstrapFailed", Message: "sandbox failed to start within the bootstrap grace period; suspending it", Warn: true}
	}
	return Action{}
}
