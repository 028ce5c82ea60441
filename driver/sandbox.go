package driver

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// Labels the driver puts on the sandboxes it owns: the driver's name
// ([WithDriverName]) and the gateway's.
const (
	LabelManagedBy = core.LabelManagedBy
	LabelGateway   = core.LabelGateway
)

// Phase is a sandbox's state as the driver reports it, derived from the
// intent and the conditions the controller wrote for the current
// generation (see the package doc).
type Phase = core.Phase

// The phases.
const (
	PhaseUnknown      = core.PhaseUnknown
	PhaseProvisioning = core.PhaseProvisioning
	PhaseStarting     = core.PhaseStarting
	PhaseReady        = core.PhaseReady
	PhaseStopping     = core.PhaseStopping
	PhaseStopped      = core.PhaseStopped
	PhaseDeleting     = core.PhaseDeleting
	// PhaseFinished is terminal and not a failure: the pod succeeded, or
	// the sandbox expired and its object is retained.
	PhaseFinished = core.PhaseFinished
	PhaseError    = core.PhaseError
)

// Sandbox is the driver's view of a Sandbox resource.
type Sandbox struct {
	Namespace string
	Name      string
	UID       types.UID
	// Running is the intent: spec.operatingMode Running.
	Running bool
	Phase   Phase
	// Reason and Message explain Phase: the reason and message of the
	// current condition it was derived from, for example PodNotOwned for a
	// stop that cannot complete. Empty when the phase comes from intent
	// alone (the controller has not yet observed the last change).
	Reason  string
	Message string
	// FenceUID and FenceGeneration identify the fence NetworkPolicy the
	// sandbox was admitted under; empty if none was recorded.
	FenceUID        types.UID
	FenceGeneration int64
}

func public(s core.Sandbox) Sandbox {
	return Sandbox{
		Namespace: s.Namespace, Name: s.Name, UID: s.UID,
		Running: s.Running, Phase: s.Phase, Reason: s.Reason, Message: s.Message,
		FenceUID: s.Fence.UID, FenceGeneration: s.Fence.Generation,
	}
}
