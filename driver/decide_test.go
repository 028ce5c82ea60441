package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cur := driver.Fence{UID: "fence-uid", Generation: 2}
	old := driver.Fence{UID: "fence-uid", Generation: 1}
	live := driver.LiveFence{Known: true, Present: true, Fence: cur}
	grace := 5 * time.Minute
	late := now.Add(-grace - time.Nanosecond)
	// stuckStart is a start the controller reports cannot make progress.
	stuckStart := func(reason string, started time.Time) driver.Sandbox {
		return driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseStarting, Reason: reason, BootstrapStarted: started}
	}

	tests := []struct {
		name string
		give driver.Sandbox
		live driver.LiveFence
		want driver.ActionType
		warn bool
	}{
		{"running, fence current", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady}, live, driver.ActionNone, false},
		{"running, fence stale: fail closed", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseReady}, live, driver.ActionSuspend, true},
		{"running, fence re-created (uid changed)", driver.Sandbox{Running: true, Fence: driver.Fence{UID: "other", Generation: 2}, Phase: driver.PhaseReady}, live, driver.ActionSuspend, true},
		{"running, nothing recorded", driver.Sandbox{Running: true, Phase: driver.PhaseReady}, live, driver.ActionSuspend, true},
		{"starting, fence stale", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseStarting, BootstrapStarted: now.Add(-time.Minute)}, live, driver.ActionSuspend, true},
		{"running, fence deleted", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady}, driver.LiveFence{Known: true}, driver.ActionSuspend, true},
		{"running, admitted under a newer generation than the view: behind, not stale", driver.Sandbox{Running: true, Fence: driver.Fence{UID: "fence-uid", Generation: 3}, Phase: driver.PhaseReady}, live, driver.ActionNone, false},
		{"stopping, fence stale: nothing more", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopping}, live, driver.ActionNone, false},
		{"suspended, fence stale: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, live, driver.ActionNone, false},
		{"suspended, fence deleted: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, driver.LiveFence{Known: true}, driver.ActionNone, false},
		{"deleting, fence stale", driver.Sandbox{Running: true, Deleting: true, Fence: old, Phase: driver.PhaseDeleting}, live, driver.ActionNone, false},
		{"fence unknown: unknown is not absent", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseReady}, driver.LiveFence{}, driver.ActionNone, false},
		{"bootstrapped and ready", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady, BootstrapStarted: now.Add(-time.Minute)}, live, driver.ActionClearBootstrap, false},
		{"bootstrapped and finished", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseFinished, BootstrapStarted: late}, live, driver.ActionClearBootstrap, false},
		{"bootstrap failed within grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-time.Minute)}, live, driver.ActionNone, false},
		{"bootstrap failed exactly at grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-grace)}, live, driver.ActionNone, false},
		{"bootstrap failed past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: late}, live, driver.ActionRollback, true},
		{"start stuck on dependencies past grace", stuckStart(sandboxv1beta1.SandboxReasonDependenciesNotReady, late), live, driver.ActionRollback, true},
		{"start unschedulable past grace", stuckStart(driver.ReasonUnschedulable, late), live, driver.ActionRollback, true},
		{"start unschedulable within grace", stuckStart(driver.ReasonUnschedulable, now.Add(-time.Minute)), live, driver.ActionNone, false},
		{"start not yet observed past grace: unknown, not stuck", stuckStart("", late), live, driver.ActionNone, false},
		{"start with a transient reconciler error past grace", stuckStart("ReconcilerError", late), live, driver.ActionNone, false},
		{"bootstrap status unknown past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseUnknown, BootstrapStarted: late}, live, driver.ActionNone, false},
		{"bootstrap past grace, fence unknown", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: late}, driver.LiveFence{}, driver.ActionNone, false},
		{"stopped with a stop that cannot complete", driver.Sandbox{Fence: cur, Phase: driver.PhaseError, Reason: sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, BootstrapStarted: late}, live, driver.ActionNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := driver.Decide(tt.give, tt.live, now, grace)
			assert.Equal(t, tt.want, got.Type, "%s", got.Type)
			assert.Equal(t, tt.warn, got.Warn)
			if got.Warn {
				assert.NotEmpty(t, got.Reason, "a warned transition has an Event reason")
			}
		})
	}
}

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
	give       driver.Sandbox
	want       driver.Phase
	wantReason string
}

func runPhaseCases(t *testing.T, tests []phaseCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]metav1.Condition(nil), tt.give.Conditions...)
			assert.Equal(t, tt.want, driver.DerivePhase(tt.give))
			assert.Equal(t, before, tt.give.Conditions, "DerivePhase must not change its argument")
			assert.Equal(t, tt.wantReason, driver.Explain(tt.give), "the reason beside the phase")
		})
	}
}

// TestDerivePhaseV1beta1: the conditions agent-sandbox v0.5.x writes.
func TestDerivePhaseV1beta1(t *testing.T) {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := func(gen int64, running bool, conds ...metav1.Condition) driver.Sandbox {
		return driver.Sandbox{Version: "v1beta1", Generation: gen, Running: running, HasStatus: len(conds) > 0, Conditions: conds}
	}
	bootstrapping := func(s driver.Sandbox) driver.Sandbox { s.BootstrapStarted = started; return s }
	notSuspended := cond(condSuspended, no, sandboxv1beta1.SandboxReasonNotSuspended, 1)
	tests := []phaseCase{
		{"no status", sb(1, true), driver.PhaseUnknown, ""},
		{"created, no status yet", bootstrapping(sb(1, true)), driver.PhaseStarting, ""},
		{"deleting wins", driver.Sandbox{Generation: 1, Deleting: true, HasStatus: true, Conditions: []metav1.Condition{cond(condReady, yes, "DependenciesReady", 1)}}, driver.PhaseDeleting, ""},
		{"ready", sb(1, true, notSuspended, cond(condReady, yes, "DependenciesReady", 1)), driver.PhaseReady, "DependenciesReady"},
		{"ready wins over a stale Suspended=True (v0.5.0-0.5.3 after a resume)", sb(3, true, cond(condSuspended, yes, "PodTerminated", 3), cond(condReady, yes, "DependenciesReady", 3)), driver.PhaseReady, "DependenciesReady"},
		{"suspended", sb(2, false, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), driver.PhaseStopped, "PodTerminated"},
		{"suspending: pod terminating", sb(2, false, cond(condSuspended, no, "PodTerminating", 2), cond(condReady, no, "SandboxSuspended", 2)), driver.PhaseStopping, "PodTerminating"},
		{"suspending: pod state unknown", sb(2, false, cond(condSuspended, metav1.ConditionUnknown, "PodStateUnknown", 2), cond(condReady, no, "ReconcilerError", 2)), driver.PhaseStopping, "PodStateUnknown"},
		{"stop cannot complete: pod not owned", sb(2, false, cond(condSuspended, no, "PodNotOwned", 2), cond(condReady, no, "SandboxSuspended", 2)), driver.PhaseError, "PodNotOwned"},
		{"right after a stop: every condition stale", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, yes, "DependenciesReady", 1)), driver.PhaseStopping, ""},
		{"right after a start: every condition stale", bootstrapping(sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2))), driver.PhaseStarting, ""},
		{"right after a start, no bootstrap mark: intent still decides", sb(3, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, no, "SandboxSuspended", 2)), driver.PhaseStarting, ""},
		{"starting: dependencies not ready", bootstrapping(sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1))), driver.PhaseStarting, "DependenciesNotReady"},
		{"starting: unschedulable (v0.5.6 PodScheduled)", bootstrapping(sb(1, true, notSuspended, cond(condScheduled, no, "Unschedulable", 1), cond(condReady, no, "DependenciesNotReady", 1))), driver.PhaseStarting, "Unschedulable"},
		{"resumed but not yet running again", bootstrapping(sb(2, true, notSuspended, cond(condReady, no, "SandboxSuspended", 2))), driver.PhaseStarting, "SandboxSuspended"},
		{"lost its pod, no bootstrap", sb(1, true, notSuspended, cond(condReady, no, "DependenciesNotReady", 1)), driver.PhaseProvisioning, "DependenciesNotReady"},
		{"reconciler error", sb(1, true, notSuspended, cond(condReady, no, "ReconcilerError", 1)), driver.PhaseProvisioning, "ReconcilerError"},
		{"pod failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodFailed", 1), cond(condReady, no, "PodFailed", 1)), driver.PhaseError, "PodFailed"},
		{"multiple pods", sb(1, true, notSuspended, cond(condReady, no, "MultiplePods", 1)), driver.PhaseError, "MultiplePods"},
		{"pod succeeded: finished, not failed", sb(1, true, notSuspended, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "PodSucceeded", 1)), driver.PhaseFinished, "PodSucceeded"},
		{"expired under Retain: finished", sb(1, true, cond(condFinished, yes, "PodSucceeded", 1), cond(condReady, no, "SandboxExpired", 1)), driver.PhaseFinished, "PodSucceeded"},
		{"expired, no Finished: finished", sb(1, true, notSuspended, cond(condReady, no, "SandboxExpired", 1)), driver.PhaseFinished, "SandboxExpired"},
		{"unknown Ready reason", sb(1, true, notSuspended, cond(condReady, no, "SomethingNew", 1)), driver.PhaseError, "SomethingNew"},
		{"stale suspended ignored, ready current", sb(4, true, cond(condSuspended, yes, "PodTerminated", 2), cond(condReady, yes, "DependenciesReady", 4)), driver.PhaseReady, "DependenciesReady"},
		{"stopped after it expired (v0.5.6 keeps only Ready current)", sb(2, false, cond(condSuspended, no, "NotSuspended", 1), cond(condReady, no, "SandboxExpired", 2)), driver.PhaseFinished, "SandboxExpired"},
	}
	runPhaseCases(t, tests)
}

// TestDerivePhaseV1alpha1: the conditions agent-sandbox v0.4.x writes:
// Ready and Finished only, and Ready=True DependenciesReady for replicas 0.
func TestDerivePhaseV1alpha1(t *testing.T) {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := func(gen int64, running bool, pod driver.PodState, conds ...metav1.Condition) driver.Sandbox {
		return driver.Sandbox{Version: "v1alpha1", Generation: gen, Running: running, Pod: pod, HasStatus: len(conds) > 0, Conditions: conds}
	}
	stoppedReady := cond(condReady, yes, "DependenciesReady", 2)
	tests := []phaseCase{
		{"running and ready", sb(1, true, driver.PodNotChecked, cond(condReady, yes, "DependenciesReady", 1)), driver.PhaseReady, "DependenciesReady"},
		{"replicas 0, a pod the sandbox does not own: the stop cannot complete", sb(2, false, driver.PodNotOwned, stoppedReady), driver.PhaseError, "PodNotOwned"},
		{"replicas 0, Ready=True, pod still there: stopping, not ready", sb(2, false, driver.PodPresent, stoppedReady), driver.PhaseStopping, ""},
		{"replicas 0, Ready=True, pod not checked: stopping", sb(2, false, driver.PodNotChecked, stoppedReady), driver.PhaseStopping, ""},
		{"replicas 0, pod gone: stopped", sb(2, false, driver.PodAbsent, stoppedReady), driver.PhaseStopped, ""},
		{"right after a stop, conditions stale", sb(2, false, driver.PodPresent, cond(condReady, yes, "DependenciesReady", 1)), driver.PhaseStopping, ""},
		{"right after a start, conditions stale", driver.Sandbox{Version: "v1alpha1", Generation: 3, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []metav1.Condition{stoppedReady}}, driver.PhaseStarting, ""},
		{"starting", driver.Sandbox{Version: "v1alpha1", Generation: 1, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []metav1.Condition{cond(condReady, no, "DependenciesNotReady", 1)}}, driver.PhaseStarting, "DependenciesNotReady"},
		{"pod failed", sb(1, true, driver.PodNotChecked, cond(condReady, no, "DependenciesNotReady", 1), cond(condFinished, yes, "PodFailed", 1)), driver.PhaseError, "PodFailed"},
		{"pod succeeded", sb(1, true, driver.PodNotChecked, cond(condReady, no, "DependenciesNotReady", 1), cond(condFinished, yes, "PodSucceeded", 1)), driver.PhaseFinished, "PodSucceeded"},
	}
	runPhaseCases(t, tests)
}
