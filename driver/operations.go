package driver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/retry"
)

// CreateSpec is what a caller chooses about a new sandbox.
type CreateSpec struct {
	// PodTemplate becomes spec.podTemplate. Required: the Sandbox CRD
	// requires spec.podTemplate.spec.containers, each with a name.
	PodTemplate sandboxv1beta1.PodTemplate
}

// validate checks what the CRD would reject, so that bad input fails
// before anything is sent, with the field and the value named.
func (c CreateSpec) validate(op, ns, name string) *Error {
	const field = "spec.podTemplate.spec.containers"
	containers := c.PodTemplate.Spec.Containers
	if len(containers) == 0 {
		return invalid(op, ns, name, "%s: required: a sandbox needs a pod template with at least one container", field)
	}
	seen := map[string]bool{}
	for i, ctr := range containers {
		if errs := validation.IsDNS1123Label(ctr.Name); len(errs) > 0 {
			return invalid(op, ns, name, "%s[%d].name: %q is not a DNS label: %s", field, i, ctr.Name, errs[0])
		}
		if seen[ctr.Name] {
			return invalid(op, ns, name, "%s[%d].name: duplicate container name %q", field, i, ctr.Name)
		}
		seen[ctr.Name] = true
	}
	return nil
}

// Create ensures the namespace's fence exists, and creates the sandbox,
// running, with the fence's (uid, generation) recorded. A spec the CRD
// would reject fails with [KindInvalidArgument] and sends nothing.
func (d *Driver) Create(ctx context.Context, ns, name string, spec CreateSpec) (Sandbox, error) {
	const op = "create"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	if err := spec.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	fence, err := d.ensureFence(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	client, err := d.sandboxes(ctx)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	tmpl := *spec.PodTemplate.DeepCopy()
	meta := metav1.ObjectMeta{
		Name:      name,
		Namespace: ns,
		Labels:    d.ownLabels(),
		Annotations: map[string]string{
			AnnotationFenceUID:        string(fence.UID),
			AnnotationFenceGeneration: strconv.FormatInt(fence.Generation, 10),
			AnnotationBootstrap:       time.Now().UTC().Format(time.RFC3339),
		},
	}
	s, err := client.create(ctx, meta, tmpl)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return s, nil
}

// Get returns the sandbox.
func (d *Driver) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "get"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	s, err := d.get(ctx, op, ns, name)
	if err != nil {
		return Sandbox{}, err
	}
	if err := d.checkPods(ctx, []*Sandbox{&s}); err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return s, nil
}

// get reads the sandbox and checks that the driver owns it.
func (d *Driver) get(ctx context.Context, op, ns, name string) (Sandbox, error) {
	client, err := d.sandboxes(ctx)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	s, err := client.get(ctx, ns, name)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	if !d.owns(s.labels) {
		return Sandbox{}, &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: fmt.Errorf("sandbox is not managed by %s for gateway %s", d.opts.driverName, d.gateway)}
	}
	return s, nil
}

// List returns the gateway's sandboxes in ns, reading every page.
func (d *Driver) List(ctx context.Context, ns string) ([]Sandbox, error) {
	const op = "list"
	if err := d.validateNamespace(op, ns, ""); err != nil {
		return nil, err
	}
	out, err := d.list(ctx, ns)
	if err != nil {
		return nil, err
	}
	ptrs := make([]*Sandbox, len(out))
	for i := range out {
		ptrs[i] = &out[i]
	}
	if err := d.checkPods(ctx, ptrs); err != nil {
		return nil, wrap(op, ns, "", err)
	}
	return out, nil
}

// list reads every page of the gateway's sandboxes in ns. It does not
// look up pods: the reconciler decides from intent, not from whether a
// stopped sandbox's pod is gone yet.
func (d *Driver) list(ctx context.Context, ns string) ([]Sandbox, error) {
	client, err := d.sandboxes(ctx)
	if err != nil {
		return nil, wrap("list", ns, "", err)
	}
	var out []Sandbox
	opts := metav1.ListOptions{LabelSelector: d.selector(), Limit: d.opts.pageSize}
	for {
		page, next, err := client.list(ctx, ns, opts)
		if err != nil {
			return nil, wrap("list", ns, "", err)
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		opts.Continue = next
	}
}

// checkPods settles Stopping from Stopped for stopped v1alpha1 sandboxes,
// whose controllers (agent-sandbox v0.4.x) report Ready=True with replicas
// 0 whether or not the pod is still terminating, and refuse, silently, to
// delete a pod of that name they do not own. For each such sandbox it reads
// the pod the controller names (the pod-name annotation, else the sandbox's
// name): gone is Stopped, the sandbox's own is Stopping, another's is the
// stop that cannot complete. One GET per stopped v1alpha1 sandbox; none on
// v1beta1, whose controllers say all this in the Suspended condition.
func (d *Driver) checkPods(ctx context.Context, sandboxes []*Sandbox) error {
	for _, s := range sandboxes {
		if s.Version != sandboxv1alpha1.GroupVersion.Version || s.Running || s.Deleting {
			continue
		}
		pod, err := d.kube.CoreV1().Pods(s.Namespace).Get(ctx, s.podName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			s.pod = podAbsent
		case err != nil:
			return err
		case metav1.IsControlledBy(pod, &metav1.ObjectMeta{UID: s.UID}):
			s.pod = podPresent
		default:
			s.pod = podNotOwned
		}
		*s = withPhase(*s)
	}
	return nil
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
	ctx = retry.ContextWithIdempotent(ctx)
	s, err := d.update(ctx, op, ns, name, nil, func(s Sandbox) *patch {
		if !s.Running && s.BootstrapStarted.IsZero() {
			return nil
		}
		return suspendPatch(s.Version)
	})
	if err != nil {
		return Sandbox{}, err
	}
	if err := d.checkPods(ctx, []*Sandbox{&s}); err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	if s.Phase == PhaseError && s.Reason == sandboxv1beta1.SandboxReasonSuspendedPodNotOwned {
		return s, &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: fmt.Errorf("the stop cannot complete: %s: %s", s.Reason, s.Message)}
	}
	return s, nil
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
	fence, err := d.ensureFence(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return d.update(ctx, op, ns, name, nil, func(s Sandbox) *patch {
		if s.Running && s.Fence == fence {
			return nil
		}
		return admitPatch(s.Version, fence, time.Now())
	})
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
	ctx = retry.ContextWithIdempotent(ctx)
	s, err := d.get(ctx, op, ns, name)
	if err != nil {
		return err
	}
	client, err := d.sandboxes(ctx)
	if err != nil {
		return wrap(op, ns, name, err)
	}
	err = client.delete(ctx, ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: err}
	}
	return wrap(op, ns, name, err)
}
