package driver

import (
	"context"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver/internal"
)

// The reconciler reaches the core through a function variable, as grpc-go
// reaches its internals: typed any, since package internal cannot name
// *Driver, and asserted once, in reconciler.New.
func init() {
	internal.Core = func(d any) any { return core{d.(*Driver)} }
}

// core is what package reconciler uses of a Driver beyond its public API.
// Its methods are exported so that the reconciler's interface can name
// them; the type is not, so they are no part of this package's API.
type core struct{ d *Driver }

func (c core) Logger() logr.Logger { return c.d.opts.logger }

// Clients returns the driver's clientsets, which share one connection pool.
func (c core) Clients() (versioned.Interface, kubernetes.Interface) { return c.d.sandboxCS, c.d.kube }

// Selector is the label selector of the gateway's sandboxes.
func (c core) Selector() string { return c.d.selector() }

func (c core) FenceName() string { return c.d.opts.fenceName }

// Version probes the served Sandbox version, once.
func (c core) Version(ctx context.Context) (string, error) {
	client, err := c.d.sandboxes(ctx)
	if err != nil {
		return "", err
	}
	return client.version(), nil
}

// View converts an informer's Sandbox object of either version, or
// returns the view a [core.Lean] cache entry holds.
func (c core) View(o any) (Sandbox, bool) {
	if e, ok := o.(*cached); ok {
		return e.view, true
	}
	return toView(o)
}

// Lean is the reconciler's informer transform: it replaces a Sandbox with
// the view the reconciler decides from, without the conditions and labels
// it derived the phase from and the reconciler does not read, and without
// the rest of the object (managedFields, the pod template, other
// annotations). Get and List read the API server, never this cache.
func (c core) Lean(o any) (any, error) {
	s, ok := toView(o)
	if !ok {
		return o, nil
	}
	s.Conditions, s.labels = nil, nil
	return &cached{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}, view: s}, nil
}

// cached is a Sandbox as the reconciler's cache keeps it: its view, and of
// its metadata what the informer's store keys it by and client-go's
// consistency checks compare (the uid). It is a runtime.Object, as those
// checks require of every cached object.
type cached struct {
	metav1.ObjectMeta
	view Sandbox
}

func (e *cached) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (e *cached) DeepCopyObject() runtime.Object {
	out := &cached{view: e.view}
	e.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (c core) ReadFence(ctx context.Context, ns string) (Fence, bool, error) {
	return c.d.readFence(ctx, ns)
}

// List reads every page of ns's sandboxes without looking up pods: the
// reconciler decides from intent, not from whether a pod is gone yet.
func (c core) List(ctx context.Context, ns string) ([]Sandbox, error) { return c.d.list(ctx, ns) }

// Patch writes the change decide asks for, through the guarded patch that
// starts from s and decides again from a fresh read after a conflict.
func (c core) Patch(ctx context.Context, s *Sandbox, decide func(Sandbox) internal.Change) (Sandbox, error) {
	return c.d.update(ctx, "reconcile", s.Namespace, s.Name, s, func(cur Sandbox) *patch {
		switch decide(cur) {
		case internal.Suspend:
			return suspendPatch(cur.Version)
		case internal.ClearBootstrap:
			return clearBootstrapPatch()
		}
		return nil
	})
}

// Warn records a Warning Event about s; false when it was dropped (see
// [WithEventLimit]).
func (c core) Warn(s Sandbox, reason, action, note string) bool {
	return c.d.events.warn(s, reason, action, note)
}

// Error returns err as an [*Error] of op on ns/name.
func (c core) Error(op, ns, name string, err error) error { return wrap(op, ns, name, err) }

// toView converts a cached Sandbox of either version.
func toView(o any) (Sandbox, bool) {
	switch s := o.(type) {
	case *sandboxv1beta1.Sandbox:
		return fromV1beta1(s), true
	case *sandboxv1alpha1.Sandbox:
		return fromV1alpha1(s), true
	}
	return Sandbox{}, false
}
