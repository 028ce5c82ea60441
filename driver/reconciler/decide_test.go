package reconciler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cur := driver.Fence{UID: "fence-uid", Generation: 2}
	old := driver.Fence{UID: "fence-uid", Generation: 1}
	live := reconciler.LiveFence{Known: true, Present: true, Fence: cur}
	grace := 5 * time.Minute
	late := now.Add(-grace - time.Nanosecond)
	// stuckStart is a start the controller reports cannot make progress.
	stuckStart := func(reason string, started time.Time) driver.Sandbox {
		return driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseStarting, Reason: reason, BootstrapStarted: started}
	}

	tests := []struct {
		name string
		give driver.Sandbox
		live reconciler.LiveFence
		want reconciler.ActionType
		warn bool
	}{
		{"running, fence current", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady}, live, reconciler.ActionNone, false},
		{"running, fence stale: fail closed", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseReady}, live, reconciler.ActionSuspend, true},
		{"running, fence re-created (uid changed)", driver.Sandbox{Running: true, Fence: driver.Fence{UID: "other", Generation: 2}, Phase: driver.PhaseReady}, live, reconciler.ActionSuspend, true},
		{"running, nothing recorded", driver.Sandbox{Running: true, Phase: driver.PhaseReady}, live, reconciler.ActionSuspend, true},
		{"starting, fence stale", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseStarting, BootstrapStarted: now.Add(-time.Minute)}, live, reconciler.ActionSuspend, true},
		{"running, fence deleted", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady}, reconciler.LiveFence{Known: true}, reconciler.ActionSuspend, true},
		{"running, admitted under a newer generation than the view: behind, not stale", driver.Sandbox{Running: true, Fence: driver.Fence{UID: "fence-uid", Generation: 3}, Phase: driver.PhaseReady}, live, reconciler.ActionNone, false},
		{"stopping, fence stale: nothing more", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopping}, live, reconciler.ActionNone, false},
		{"suspended, fence stale: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, live, reconciler.ActionNone, false},
		{"suspended, fence deleted: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, reconciler.LiveFence{Known: true}, reconciler.ActionNone, false},
		{"deleting, fence stale", driver.Sandbox{Running: true, Deleting: true, Fence: old, Phase: driver.PhaseDeleting}, live, reconciler.ActionNone, false},
		{"fence unknown: unknown is not absent", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseReady}, reconciler.LiveFence{}, reconciler.ActionNone, false},
		{"bootstrapped and ready", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady, BootstrapStarted: now.Add(-time.Minute)}, live, reconciler.ActionClearBootstrap, false},
		{"bootstrapped and finished", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseFinished, BootstrapStarted: late}, live, reconciler.ActionClearBootstrap, false},
		{"bootstrap failed within grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-time.Minute)}, live, reconciler.ActionNone, false},
		{"bootstrap failed exactly at grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-grace)}, live, reconciler.ActionNone, false},
		{"bootstrap failed past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: late}, live, reconciler.ActionRollback, true},
		{"start stuck on dependencies past grace", stuckStart(sandboxv1beta1.SandboxReasonDependenciesNotReady, late), live, reconciler.ActionRollback, true},
		{"start unschedulable past grace", stuckStart(corev1.PodReasonUnschedulable, late), live, reconciler.ActionRollback, true},
		{"start unschedulable within grace", stuckStart(corev1.PodReasonUnschedulable, now.Add(-time.Minute)), live, reconciler.ActionNone, false},
		{"start not yet observed past grace: unknown, not stuck", stuckStart("", late), live, reconciler.ActionNone, false},
		{"start with a transient reconciler error past grace", stuckStart("ReconcilerError", late), live, reconciler.ActionNone, false},
		{"bootstrap status unknown past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseUnknown, BootstrapStarted: late}, live, reconciler.ActionNone, false},
		{"bootstrap past grace, fence unknown", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: late}, reconciler.LiveFence{}, reconciler.ActionNone, false},
		{"stopped with a stop that cannot complete", driver.Sandbox{Fence: cur, Phase: driver.PhaseError, Reason: sandboxv1beta1.SandboxReasonSuspendedPodNotOwned, BootstrapStarted: late}, live, reconciler.ActionNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reconciler.Decide(tt.give, tt.live, now, grace)
			assert.Equal(t, tt.want, got.Type, "%s", got.Type)
			assert.Equal(t, tt.warn, got.Warn)
			if got.Warn {
				assert.NotEmpty(t, got.Reason, "a warned transition has an Event reason")
			}
		})
	}
}
