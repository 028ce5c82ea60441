package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kubewire/kubewire/driver"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cur := driver.Fence{UID: "fence-uid", Generation: 2}
	old := driver.Fence{UID: "fence-uid", Generation: 1}
	live := driver.LiveFence{Known: true, Present: true, Fence: cur}
	grace := 5 * time.Minute

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
		{"stopping, fence stale: nothing more", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopping}, live, driver.ActionNone, false},
		{"suspended, fence stale: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, live, driver.ActionNone, false},
		{"suspended, fence deleted: converged", driver.Sandbox{Running: false, Fence: old, Phase: driver.PhaseStopped}, driver.LiveFence{Known: true}, driver.ActionNone, false},
		{"deleting, fence stale", driver.Sandbox{Running: true, Deleting: true, Fence: old, Phase: driver.PhaseDeleting}, live, driver.ActionNone, false},
		{"fence unknown: unknown is not absent", driver.Sandbox{Running: true, Fence: old, Phase: driver.PhaseReady}, driver.LiveFence{}, driver.ActionNone, false},
		{"bootstrapped and ready", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseReady, BootstrapStarted: now.Add(-time.Minute)}, live, driver.ActionClearBootstrap, false},
		{"bootstrap failed within grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-time.Minute)}, live, driver.ActionNone, false},
		{"bootstrap failed past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-10 * time.Minute)}, live, driver.ActionRollback, true},
		{"bootstrap slow past grace, no failure said", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseStarting, BootstrapStarted: now.Add(-10 * time.Minute)}, live, driver.ActionNone, false},
		{"bootstrap status unknown past grace", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseUnknown, BootstrapStarted: now.Add(-10 * time.Minute)}, live, driver.ActionNone, false},
		{"bootstrap past grace, fence unknown", driver.Sandbox{Running: true, Fence: cur, Phase: driver.PhaseError, BootstrapStarted: now.Add(-10 * time.Minute)}, driver.LiveFence{}, driver.ActionNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := driver.Decide(tt.give, tt.live, now, grace)
			assert.Equal(t, tt.want, got.Type, "%s", got.Type)
			assert.Equal(t, tt.warn, got.Warn)
			// Pure: the same inputs, the same answer.
			assert.Equal(t, got, driver.Decide(tt.give, tt.live, now, grace))
		})
	}
}

func TestDerivePhase(t *testing.T) {
	cond := func(typ, status, reason string, gen int64) driver.Condition {
		return driver.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: gen}
	}
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		give driver.Sandbox
		want driver.Phase
	}{
		{"no status", driver.Sandbox{Generation: 1, Running: true}, driver.PhaseUnknown},
		{"deleting wins", driver.Sandbox{Generation: 1, Deleting: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "True", "", 1)}}, driver.PhaseDeleting},
		{"ready", driver.Sandbox{Generation: 1, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "True", "", 1)}}, driver.PhaseReady},
		{"ready wins over stale suspended", driver.Sandbox{Generation: 3, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Suspended", "True", "", 3), cond("Ready", "True", "", 3)}}, driver.PhaseReady},
		{"suspended", driver.Sandbox{Generation: 2, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "SandboxSuspended", 2), cond("Suspended", "True", "", 2)}}, driver.PhaseStopped},
		{"suspending", driver.Sandbox{Generation: 2, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "SandboxSuspended", 2)}}, driver.PhaseStopping},
		{"dependencies", driver.Sandbox{Generation: 1, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "DependenciesNotReady", 1)}}, driver.PhaseProvisioning},
		{"reconciler error", driver.Sandbox{Generation: 1, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "ReconcilerError", 1)}}, driver.PhaseProvisioning},
		{"failed", driver.Sandbox{Generation: 1, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "PodFailed", 1)}}, driver.PhaseError},
		{"no ready condition", driver.Sandbox{Generation: 1, Running: true, HasStatus: true}, driver.PhaseProvisioning},
		{"stale generation ignored", driver.Sandbox{Generation: 4, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "True", "", 3), cond("Suspended", "True", "", 3)}}, driver.PhaseProvisioning},
		{"stale suspended ignored, ready current", driver.Sandbox{Generation: 4, Running: true, HasStatus: true, Conditions: []driver.Condition{cond("Suspended", "True", "", 2), cond("Ready", "True", "", 4)}}, driver.PhaseReady},
		{"starting", driver.Sandbox{Generation: 1, Running: true, BootstrapStarted: started}, driver.PhaseStarting},
		{"starting, provisioning", driver.Sandbox{Generation: 1, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "DependenciesNotReady", 1)}}, driver.PhaseStarting},
		{"starting, failed", driver.Sandbox{Generation: 1, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "False", "PodFailed", 1)}}, driver.PhaseError},
		{"started and ready", driver.Sandbox{Generation: 1, Running: true, BootstrapStarted: started, HasStatus: true, Conditions: []driver.Condition{cond("Ready", "True", "", 1)}}, driver.PhaseReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, driver.DerivePhase(tt.give))
		})
	}
}
