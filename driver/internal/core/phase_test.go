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

type phaseCase struct {
	name       string
	give       Sandbox
	want       Phase
	wantReason string
}

func runPhaseCases(t *testing.T, tests []phaseCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]metav1.Condition(nil), tt.give.Conditions...)
			assert.Equal(t, tt.want, withPhase(tt.give).Phase)
			assert.Equal(t, before, tt.give.Conditions, "deriving the phase must not change its argument")
			assert.Equal(t, tt.wantReason, withPhase(tt.give).Reason, "the reason beside the phase")
		})
	}
}

// TestPhaseV1beta1: the conditions agent-sandbox v0.5.x writes.
func TestPhaseV1beta1(t *testing.T) {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := func(gen int64, running bool, conds ...metav1.Condition) Sandbox {
		return Sandbox{Version: "v1beta1", Generation: gen, Running: running, HasStatus: len(conds) > 0, Conditions: conds}
	}
	bootstrapping := func(s Sandbox) Sandbox { s.BootstrapStarted = started; return s }
	notSuspended := cond(condSuspended, no, sandboxv1beta1.SandboxReasonNotSuspended, 1)
	tests := []phaseCase{
		{"no status", sb(1, true), PhaseUnknown, ""},
		{"created, no status yet", bootstrapping(sb(1, true)), PhaseStarting, ""},
		{"deleting wins", Sandbox{Generation: 1, Deleting: true, HasStatus: true, Conditions: []metav1.Condition{cond(condReady, yes, "DependenciesReady", 1)}}, PhaseDeleting, ""},
		{"ready", sb(1, true, notSuspended, cond(condReady, yes, "DependenciesReady", 1)), PhaseReady, "DependenciesReady"},
		{"ready wins over a stale Suspended=True (v0.5.0-0.5.3 after a resume)", sb(3, true, cond(condSuspended, yes, "PodTerminated", 3), cond(condReady, yes, "DependenciesReady", 3)), PhaseReady, "DependenciesReady"},
		{"suspended", sb(2, false, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopped, "PodTerminated"},
		{"suspending: pod terminating", sb(2, false, cond(condSuspended, no, "PodTerminating", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStopping, "PodTerminating"},
		{"suspending: pod state unknown", sb(2, false, cond(condSuspended, metav1.ConditionUnknown, "PodStateUnknown", 2), cond(condReady, no, "ReconcilerError", 2)), PhaseStopping, "PodStateUnknown"},
		{"stop cannot complete: pod not owned", sb(2, false, cond(condSuspended, no, "PodNotOwned", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseError, "PodNotOwned"},
		{"right after a stop: every condition stale", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, yes, "DependenciesReady", 1)), PhaseStopping, ""},
		{"right after a start: every condition stale", bootstrapping(sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2))), PhaseStarting, ""},
		{"right after a start, no bootstrap mark: intent still decides", sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), PhaseStarting, ""},
		{"starting: dependencies not ready", bootstrapping(sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1))), PhaseStarting, "DependenciesNotReady"},
		{"starting: unschedulable (v0.5.6 PodScheduled)", bootstrapping(sb(1, true, notSuspended, cond(condScheduled, no, "Unschedulable", 1), cond(condReady, no, "DependenciesNotReady", 1))), PhaseStarting, "Unschedulable"},
		{"resumed but not yet running again", bootstrapping(sb(2, true, notSuspended, cond(condReady, no, "SandboxSuspended", 2))), PhaseStarting, "SandboxSuspended"},
		{"lost its pod, no bootstrap", sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1)), PhaseProvisioning, "DependenciesNotReady"},
		{"reconciler error", sb(1, true, notSuspended, cond(condReady, no, "ReconcilerError", 1)), PhaseProvisioning, "ReconcilerError"},
		{"pod failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodFailed", 1), cond(condReady, no, "PodFailed", 1)), PhaseError, "PodFailed"},
		{"multiple pods", sb(1, true, notSuspended, cond(condReady, no, "MultiplePods", 1)), PhaseError, "MultiplePods"},
		{"pod succeeded: finished, not failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "PodSucceeded", 1)), PhaseFinished, "PodSucceeded"},
		{"expired under Retain: finished", sb(1, true, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "SandboxExpired", 1)), PhaseFinished, "PodSucceeded"},
		{"expired, no Finished: finished", sb(1, true, notSuspended, cond(condReady, no, "SandboxExpired", 1)), PhaseFinished, "SandboxExpired"},
		{"unknown Ready reason", sb(1, true, notSuspended, cond(condReady, no, "SomethingNew", 1)), PhaseError, "SomethingNew"},
		{"stale suspended ignored, ready current", sb(4, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, yes, "DependenciesReady", 4)), PhaseReady, "DependenciesReady"},
		{"stopped after it expired (v0.5.6 keeps only Ready current)", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, no, "SandboxExpired", 2)), PhaseFinished, "SandboxExpired"},
	}
	runPhaseCases(t, tests)
}

// TestPhaseV1alpha1: the conditions agent-sandbox v0.4.x writes:
// Ready and Finished only, and Ready=True DependenciesReady for replicas 0.
func TestPhaseV1alpha1(t *testing.T) {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := func(gen int64, running bool, pod podState, conds ...metav1.Condition) Sandbox {
		return Sandbox{Version: "v1alpha1", Generation: gen, Running: running, pod: pod, HasStatus: len(conds) > 0, Conditions: conds}
	}
	stoppedReady := cond(condReady, yes, "DependenciesReady", 2)
	tests := []phaseCase{
		{"running and ready", sb(1, true, podNotChecked, cond(condReady, yes, "DependenciesReady", 1)), PhaseReady, "DependenciesReady"},
		{"replicas 0, a pod the sandbox does not own: the stop cannot complete", sb(2, false, podNotOwned, stoppedReady), PhaseError, "PodNotOwned"},
		{"replicas 0, Ready=True, pod still there: stopping, not ready", sb(2, false, podPresent, stoppedReady), PhaseStopping, ""},
		{"replicas 0, Ready=True, pod not checked: stopping", sb(2, false, podNotChecked, stoppedReady), PhaseStopping, ""},
		{"replicas 0, pod gone: stopped", sb(2, false, podAbsent, stoppedReady), PhaseStopped, ""},
		{"right after a stop, conditions stale", sb(2, false, podPresent, cond(condReady, yes, "DependenciesReady", 1)), PhaseStopping, ""},
		{"right after a start, conditions stale", Sandbox{Version: "v1alpha1", Generation: 3, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []metav1.Condition{stoppedReady}}, PhaseStarting, ""},
		{"starting", Sandbox{Version: "v1alpha1", Generation: 1, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []metav1.Condition{cond(condReady, no, "DependenciesNotReady", 1)}}, PhaseStarting, "DependenciesNotReady"},
		{"pod failed", sb(1, true, podNotChecked, cond(condReady, no, "DependenciesNotReady", 1), cond(condFinished, yes, "PodFailed", 1)), PhaseError, "PodFailed"},
		{"pod succeeded", sb(1, true, podNotChecked, cond(condReady, no, "DependenciesNotReady", 1), cond(condFinished, yes, "PodSucceeded", 1)), PhaseFinished, "PodSucceeded"},
	}
	runPhaseCases(t, tests)
}
