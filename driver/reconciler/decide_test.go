package reconciler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver/internal/core"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cur := core.Fence{UID: "fence-uid", Generation: 2}
	old := core.Fence{UID: "fence-uid", Generation: 1}
	live := liveFence{known: true, present: true, fence: cur}
	grace := 5 * time.Minute
	late := now.Add(-grace - time.Nanosecond)
	// stuckStart is a start the controller reports cannot make progress.
	stuckStart := func(reason string, started time.Time) core.Sandbox {
		return core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseStarting, Reason: reason, BootstrapStarted: started}
	}

	tests := []struct {
		name string
		give core.Sandbox
		live liveFence
		want ActionType
		warn bool
	}{
		{"running, fence current", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseReady}, live, ActionNone, false},
		{"running, fence stale: fail closed", core.Sandbox{Running: true, Fence: old, Phase: core.PhaseReady}, live, ActionSuspend, true},
		{"running, fence re-created (uid changed)", core.Sandbox{Running: true, Fence: core.Fence{UID: "other", Generation: 2}, Phase: core.PhaseReady}, live, ActionSuspend, true},
		{"running, nothing recorded", core.Sandbox{Running: true, Phase: core.PhaseReady}, live, ActionSuspend, true},
		{"starting, fence stale", core.Sandbox{Running: true, Fence: old, Phase: core.PhaseStarting, BootstrapStarted: now.Add(-time.Minute)}, live, ActionSuspend, true},
		{"running, fence deleted", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseReady}, liveFence{known: true}, ActionSuspend, true},
		{"running, admitted under a newer generation than the view: behind, not stale", core.Sandbox{Running: true, Fence: core.Fence{UID: "fence-uid", Generation: 3}, Phase: core.PhaseReady}, live, ActionNone, false},
		{"stopping, fence stale: nothing more", core.Sandbox{Running: false, Fence: old, Phase: core.PhaseStopping}, live, ActionNone, false},
		{"suspended, fence stale: converged", core.Sandbox{Running: false, Fence: old, Phase: core.PhaseStopped}, live, ActionNone, false},
		{"suspended, fence deleted: converged", core.Sandbox{Running: false, Fence: old, Phase: core.PhaseStopped}, liveFence{known: true}, ActionNone, false},
		{"deleting, fence stale", core.Sandbox{Running: true, Deleting: true, Fence: old, Phase: core.PhaseDeleting}, live, ActionNone, false},
		{"fence unknown: unknown is not absent", core.Sandbox{Running: true, Fence: old, Phase: core.PhaseReady}, liveFence{}, ActionNone, false},
		{"bootstrapped and ready", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseReady, BootstrapStarted: now.Add(-time.Minute)}, live, ActionClearBootstrap, false},
		{"bootstrapped and finished", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseFinished, BootstrapStarted: late}, live, ActionClearBootstrap, false},
		{"bootstrap failed within grace", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseError, BootstrapStarted: now.Add(-time.Minute)}, live, ActionNone, false},
		{"bootstrap failed exactly at grace", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseError, BootstrapStarted: now.Add(-grace)}, live, ActionNone, false},
		{"bootstrap failed past grace", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseError, BootstrapStarted: late}, live, ActionRollback, true},
		{"start stuck on dependencies past grace", stuckStart(sandboxv1beta1.SandboxReasonDependenciesNotReady, late), live, ActionRollback, true},
		{"start unschedulable past grace", stuckStart(corev1.PodReasonUnschedulable, late), live, ActionRollback, true},
		{"start unschedulable within grace", stuckStart(corev1.PodReasonUnschedulable, now.Add(-time.Minute)), live, ActionNone, false},
		{"start not yet observed past grace: unknown, not stuck", stuckStart("", late), live, ActionNone, false},
		{"start with a transient reconciler error past grace", stuckStart("ReconcilerError", late), live, ActionNone, false},
		{"bootstrap status unknown past grace", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseUnknown, BootstrapStarted: late}, live, ActionNone, false},
		{"bootstrap past grace, fence unknown", core.Sandbox{Running: true, Fence: cur, Phase: core.PhaseError, BootstrapStarted: late}, liveFence{}, ActionNone, false},
		{"stopped with a stop that cannot complete", core.Sandbox{Fence: cur, Phase: core.PhaseError, Reason: sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, BootstrapStarted: late}, live, ActionNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.give, tt.live, now, grace)
			assert.Equal(t, tt.want, got.Type, "%s", got.Type.name())
			assert.Equal(t, tt.warn, got.Warn)
			if got.Warn {
				assert.NotEmpty(t, got.Reason, "a warned transition has an Event reason")
			}
		})
	}
}
