package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func cond(typ sandboxv1beta1.ConditionType, status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
	return metav1.Condition{Type: string(typ), Status: status, Reason: reason, ObservedGeneration: gen}
}

const (
	condReady     = sandboxv1beta1.SandboxConditionReady
	condSuspended = sandboxv1beta1.SandboxConditionSuspended
	condFinished  = sandboxv1beta1.SandboxConditionFinished
	condScheduled = sandboxv1beta1.SandboxConditionPodScheduled
	yes           = metav1.ConditionTrue
	no            = metav1.ConditionFalse
)

// TestPhase: the conditions agent-sandbox v0.5.x and v1.0 write, read
// against the intent.
func TestPhase(t *testing.T) {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := func(gen int64, running bool, conds ...metav1.Condition) Sandbox {
		return Sandbox{Generation: gen, Running: running, HasStatus: len(conds) > 0, Conditions: conds}
	}
	bootstrapping := func(s Sandbox) Sandbox { s.BootstrapStarted = started; return s }
	notSuspended := cond(condSuspended, no, sandboxv1beta1.SandboxReasonNotSuspended, 1)
	tests := []struct {
		name       string
		give       Sandbox
		want       Phase
		wantReason string
	}{
		{"no status", sb(1, true), PhaseUnknown, ""},
		{"created, no status yet", bootstrapping(sb(1, true)), PhaseStarting, ""},
		{"deleting wins", Sandbox{Generation: 1, Deleting: true, HasStatus: true, Conditions: []metav1.Condition{cond(condReady, yes, "DependenciesReady", 1)}}, PhaseDeleting, ""},
		{"ready", sb(1, true, notSuspended, cond(condReady, yes, "DependenciesReady", 1)), PhaseReady, "DependenciesReady"},
		{"ready wins over a stale Suspended=True (v0.5.0-0.5.3 after a resume)", sb(3, true, cond(condSuspended, yes, "PodTerminated", 3), cond(condReady, yes, "DependenciesReady", 3)), PhaseReady, "DependenciesReady"},
		{"lingering current Suspended=True (v0.5.0-0.5.3) while restarting: starting, not stopped", bootstrapping(sb(3, true, cond(condSuspended, yes, "PodTerminated", 3), cond(condReady, no, "DependenciesNotReady", 3))), PhaseStarting, "DependenciesNotReady"},
		{"resumed, lingering Suspended=False NotSuspended (v0.5.4+, v1.0) beside Ready=True: ready", sb(3, true, cond(condSuspended, no, "NotSuspended", 3), cond(condReady, yes, "DependenciesReady", 3)), PhaseReady, "DependenciesReady"},
		{"suspended", sb(2, false, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopped, "PodTerminated"},
		{"suspending: pod terminating", sb(2, false, cond(condSuspended, no, "PodTerminating", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopping, "PodTerminating"},
		{"suspending: pod not terminated yet", sb(2, false, cond(condSuspended, no, "PodNotTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopping, "PodNotTerminated"},
		{"suspending, pod terminating beside a current Ready=True: stopping, not ready or stopped", sb(2, false, cond(condSuspended, no, "PodTerminating", 2), cond(condReady, yes, "DependenciesReady", 2)), PhaseStopping, "PodTerminating"},
		{"suspending, controller cannot read the pod (Status Unknown): unknown", sb(2, false, cond(condSuspended, metav1.ConditionUnknown, "PodStateUnknown", 2), cond(condReady, no, "ReconcilerError", 2)), PhaseUnknown, "PodStateUnknown"},
		{"suspending, unknown Suspended reason: unknown, not guessed", sb(2, false, cond(condSuspended, no, "SomethingNew", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseUnknown, "SomethingNew"},
		{"stop cannot complete: pod not owned", sb(2, false, cond(condSuspended, no, "PodNotOwned", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseError, "PodNotOwned"},
		{"stopped, Ready current but Suspended stale: stopping", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopping, ""},
		{"right after a stop: every condition stale", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, yes, "DependenciesReady", 1)), PhaseStopping, ""},
		{"right after a start: every condition stale", bootstrapping(sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2))), PhaseStarting, ""},
		{"right after a start, no bootstrap mark: intent still decides", sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStarting, ""},
		{"starting: dependencies not ready", bootstrapping(sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1))), PhaseStarting, "DependenciesNotReady"},
		{"starting: unschedulable (v0.5.6 PodScheduled)", bootstrapping(sb(1, true, notSuspended, cond(condScheduled, no, "Unschedulable", 1), cond(condReady, no, "DependenciesNotReady", 1))), PhaseStarting, "Unschedulable"},
		{"resumed but not yet running again", bootstrapping(sb(2, true, notSuspended, cond(condReady, no, "SandboxSuspended", 2))), PhaseStarting, "SandboxSuspended"},
		{"lost its pod, no bootstrap", sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1)), PhaseProvisioning, "DependenciesNotReady"},
		{"reconciler error", sb(1, true, notSuspended, cond(condReady, no, "ReconcilerError", 1)), PhaseProvisioning, "ReconcilerError"},
		{"pod failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodFailed", 1), cond(condReady, no, "PodFailed", 1)), PhaseError, "PodFailed"},
		{"pod failed, Ready only", sb(1, true, notSuspended, cond(condReady, no, "PodFailed", 1)), PhaseError, "PodFailed"},
		{"multiple pods", sb(1, true, notSuspended, cond(condReady, no, "MultiplePods", 1)), PhaseError, "MultiplePods"},
		{"invalid configuration (after v1.0.3): an error the user must fix, not unknown", sb(1, true, notSuspended, cond(condReady, no, "InvalidConfiguration", 1)), PhaseError, "InvalidConfiguration"},
		{"invalid configuration while stopping: an error, not stopping", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, no, "InvalidConfiguration", 2)), PhaseError, "InvalidConfiguration"},
		{"pod succeeded: finished, not failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "PodSucceeded", 1)), PhaseFinished, "PodSucceeded"},
		{"expired under Retain: finished", sb(1, true, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "SandboxExpired", 1)), PhaseFinished, "PodSucceeded"},
		{"expired, no Finished: finished", sb(1, true, notSuspended, cond(condReady, no, "SandboxExpired", 1)), PhaseFinished, "SandboxExpired"},
		{"unknown Ready reason: unknown, not an error", sb(1, true, notSuspended, cond(condReady, no, "SomethingNew", 1)), PhaseUnknown, "SomethingNew"},
		{"unknown Finished reason: unknown, not an error", sb(1, true, notSuspended, cond(condFinished, yes, "SomethingNew", 1), cond(condReady, no, "SomethingNew", 1)), PhaseUnknown, "SomethingNew"},
		{"stale suspended ignored, ready current", sb(4, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, yes, "DependenciesReady", 4)), PhaseReady, "DependenciesReady"},
		{"stopped after it expired (v0.5.6 keeps only Ready current)", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, no, "SandboxExpired", 2)), PhaseFinished, "SandboxExpired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]metav1.Condition(nil), tt.give.Conditions...)
			got := withPhase(tt.give)
			assert.Equal(t, tt.want, got.Phase)
			assert.Equal(t, before, tt.give.Conditions, "deriving the phase must not change its argument")
			assert.Equal(t, tt.wantReason, got.Reason, "the reason beside the phase")
		})
	}
}
