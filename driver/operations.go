package driver

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// Create ensures the namespace's fence exists, and creates the sandbox,
// running, with tmpl as its spec.podTemplate and the fence's (uid,
// generation) recorded. A template the CRD would reject (it requires
// containers, each with a name) fails with [KindInvalidArgument] naming
// the field and the value, and sends nothing.
func (d *Driver) Create(ctx context.Context, ns, name string, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error) {
	const op = "create"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	if err := validateTemplate(op, ns, name, tmpl); err != nil {
		return Sandbox{}, err
	}
	fence, err := d.fence(ctx, op, ns, name)
	if err != nil {
		return Sandbox{}, err
	}
	s, err := d.c.Create(ctx, ns, name, fence, tmpl)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return public(s), nil
}

// validateTemplate checks what the CRD would reject, so that bad input
// fails before anything is sent, with the field and the value named.
func validateTemplate(op, ns, name string, tmpl sandboxv1beta1.PodTemplate) *Error {
	const field = "spec.podTemplate.spec.containers"
	containers := tmpl.Spec.Containers
	if len(containers) == 0 {
		return invalid(op, ns, name, "%s: required: a sandbox needs a pod template with at least one container", field)
	}
	seen := map[string]bool{}
	for i, ctr := range containers {
		if errs := validation.IsDNS1123Label(ctr.Name); len(errs) > 0 {
			return invalid(op, ns, name, "%s[%d].name: %s is not a DNS label: %s", field, i, quoted(ctr.Name), errs[0])
		}
		if seen[ctr.Name] {
			return invalid(op, ns, name, "%s[%d].name: duplicate container name %s", field, i, quoted(ctr.Name))
		}
		seen[ctr.Name] = true
	}
	return nil
}

// Get returns the sandbox.
func (d *Driver) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "get"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	s, err := d.c.Get(ctx, ns, name)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return public(s), nil
}

// List returns the gateway's sandboxes in ns, reading every page.
func (d *Driver) List(ctx context.Context, ns string) ([]Sandbox, error) {
	const op = "list"
	if err := d.validateNamespace(op, ns, ""); err != nil {
		return nil, err
	}
	all, err := d.c.List(ctx, ns)
	if err != nil {
		return nil, wrap(op, ns, "", err)
	}
	out := make([]Sandbox, len(all))
	for i, s := range all {
		out[i] = public(s)
	}
	return out, nil
}

// Stop suspends the sandbox: its intent becomes stopped and the
// controller removes its pod. It returns once the intent is recorded, with
// the sandbox Stopping, or Stopped if the controller already finished.
// Stopping a stopped sandbox sends nothing. A stop the controller reports
// it cannot complete (its pod is not the sandbox's: PodNotOwned) fails
// with [KindPrecondition].
func (d *Driver) Stop(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "stop"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	s, err := d.c.Update(ctx, ns, name, nil, func(s core.Sandbox, _ error) *core.Patch {
		if !s.Running && s.BootstrapStarted.IsZero() {
			return nil
		}
		return core.SuspendPatch()
	})
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	if s.Phase == PhaseError && s.Reason == sandboxv1beta1.SandboxReasonSuspendedPodNotOwned {
		return public(s), &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: fmt.Errorf("the stop cannot complete: %s: %s", s.Reason, s.Message)}
	}
	return public(s), nil
}

// Start reads the namespace's fence (creating it if it is missing), records
// its current (uid, generation) on the sandbox and sets it running. It
// returns once the intent is recorded, with the sandbox Starting (or Ready).
// Starting a running sandbox admitted under the current fence sends
// nothing.
func (d *Driver) Start(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "start"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	fence, err := d.fence(ctx, op, ns, name)
	if err != nil {
		return Sandbox{}, err
	}
	s, err := d.c.Update(ctx, ns, name, nil, func(s core.Sandbox, _ error) *core.Patch {
		if s.Running && s.Fence == fence {
			return nil
		}
		return core.AdmitPatch(fence, time.Now())
	})
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return public(s), nil
}

// Delete deletes the sandbox, with a precondition on its uid so that a
// sandbox re-created under the same name is not deleted by mistake. A delete
// that finds the sandbox already gone (a retried request whose first copy
// succeeded) reports success.
func (d *Driver) Delete(ctx context.Context, ns, name string) error {
	const op = "delete"
	if err := d.validate(op, ns, name); err != nil {
		return err
	}
	s, err := d.c.Get(ctx, ns, name)
	if err != nil {
		return wrap(op, ns, name, err)
	}
	err = d.c.Delete(ctx, ns, name, s.UID)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: err}
	}
	return wrap(op, ns, name, err)
}

// fence returns ns's fence for op, creating it if it is missing. The
// Sandbox API is probed first: without agent-sandbox, no fence is made.
func (d *Driver) fence(ctx context.Context, op, ns, name string) (core.Fence, error) {
	if err := d.c.Probe(ctx); err != nil {
		return core.Fence{}, wrap(op, ns, name, err)
	}
	fence, err := d.c.EnsureFence(ctx, ns)
	if err != nil {
		return core.Fence{}, wrap(op, ns, name, err)
	}
	return fence, nil
}

func (d *Driver) validateNamespace(op, ns, name string) *Error {
	if !d.c.Serves(ns) {
		return &Error{Op: op, Namespace: ns, Name: name, Kind: KindInvalidArgument, Err: &notServedError{ns, d.c.Namespaces}}
	}
	return nil
}

// notServedError is [ErrNotServed] for namespace ns, naming those served.
type notServedError struct {
	ns     string
	served []string
}

func (e *notServedError) Error() string {
	return fmt.Sprintf("unknown namespace %s: the driver serves %v", quoted(e.ns), e.served)
}

func (e *notServedError) Is(target error) bool { return target == ErrNotServed }

func (d *Driver) validate(op, ns, name string) *Error {
	if err := d.validateNamespace(op, ns, name); err != nil {
		return err
	}
	if name == "" {
		return invalid(op, ns, name, "empty sandbox name")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return invalid(op, ns, name, "sandbox name %s is not a DNS label: %s", quoted(name), errs[0])
	}
	return nil
}
