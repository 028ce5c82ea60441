// Package core is the typed core that package driver and package
// reconciler share: a driver's clients and settings, the view of a
// Sandbox, the guarded patch, the fence reads
// and the Event recorder. Package driver validates input and speaks its
// public types; package reconciler reaches a driver's core with [Of].
package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
)

// Labels the driver puts on the sandboxes it owns; package driver exports
// them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelGateway   = "kubewire.io/gateway"
)

// Settings are a driver's choices, validated by package driver.
type Settings struct {
	Gateway    string
	DriverName string
	FenceName  string
	// Namespaces are sorted, without duplicates.
	Namespaces []string
	Log        logr.Logger
	// EventQPS and EventBurst bound the Events recorded.
	EventQPS   float64
	EventBurst int
}

// Core is one driver's clients and settings. It is safe for concurrent
// use.
type Core struct {
	Settings
	Sandboxes versioned.Interface
	Kube      kubernetes.Interface

	serves map[string]bool
	events *recorder

	// probing holds a token while a caller probes: a channel, not a mutex,
	// so that a caller waiting for another's probe ends with its own
	// context, not with the other's probe (up to its attempts' timeouts).
	probing chan struct{}
	probed  atomic.Bool // the API server served v1beta1 Sandboxes
}

// New returns the core of a driver whose requests go through sandboxes
// and kube and whose Events go through events.
func New(s Settings, sandboxes versioned.Interface, kube, events kubernetes.Interface) *Core {
	c := &Core{Settings: s, Sandboxes: sandboxes, Kube: kube, serves: map[string]bool{}, probing: make(chan struct{}, 1)}
	for _, ns := range s.Namespaces {
		c.serves[ns] = true
	}
	c.events = newRecorder(events, s.DriverName, rate.NewLimiter(rate.Limit(s.EventQPS), s.EventBurst), s.Log)
	return c
}

// Handle carries a driver's core: package driver embeds it, under a name
// of its own that is not exported, so that [Of] reaches the core and
// nothing outside this module does.
type Handle struct{ c *Core }

// NewHandle returns the handle of c.
func NewHandle(c *Core) Handle { return Handle{c} }

func (h Handle) core() *Core { return h.c }

// Of returns the core of a driver.
func Of(d interface{ core() *Core }) *Core { return d.core() }

// Serves reports whether ns is one of the driver's namespaces.
func (c *Core) Serves(ns string) bool { return c.serves[ns] }

// Selector is the label selector of the gateway's sandboxes.
func (c *Core) Selector() string { return labels.SelectorFromSet(c.OwnLabels()).String() }

// OwnLabels are the labels of the gateway's sandboxes.
func (c *Core) OwnLabels() labels.Set {
	return labels.Set{LabelManagedBy: c.DriverName, LabelGateway: c.Gateway}
}

// ErrNotOwned is the error of an operation on a sandbox that another
// driver or gateway manages.
var ErrNotOwned = errors.New("sandbox is not managed by this driver for this gateway")

// ErrNotInstalled is the error of the API probe when the API server
// serves no Sandbox version.
var ErrNotInstalled = fmt.Errorf("the API server does not serve %s sandboxes; is agent-sandbox installed?", sandboxv1beta1.GroupVersion)

// v1alpha1 is the Sandbox API of agent-sandbox v0.4.x and earlier, which
// agent-sandbox v1.0 removed from its module and the driver no longer
// speaks. It is named here only to recognise a cluster that serves it
// alone.
var v1alpha1 = schema.GroupVersion{Group: sandboxv1beta1.GroupVersion.Group, Version: "v1alpha1"}

// ErrV1alpha1Only is the error of the API probe when the API server serves
// Sandboxes only as v1alpha1: agent-sandbox v0.4.x or earlier.
var ErrV1alpha1Only = fmt.Errorf("the API server serves %s sandboxes only (agent-sandbox v0.4.x or earlier); the driver speaks %s: upgrade agent-sandbox to v0.5.x, which serves both, then to v1.0 (agent-sandbox's docs/api-migration-guide.md)", v1alpha1, sandboxv1beta1.GroupVersion)

// Probe checks, once, that discovery lists v1beta1 Sandboxes (agent-sandbox
// v0.5.0 and later); when it does not, whether it lists v1alpha1 alone, to
// say how to upgrade. A failed probe is not remembered. One caller probes
// at a time; the others wait for it, each until its own ctx is done.
func (c *Core) Probe(ctx context.Context) error {
	if c.probed.Load() {
		return nil
	}
	select {
	case c.probing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the API probe: %w", ctx.Err())
	}
	defer func() { <-c.probing }()
	if c.probed.Load() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, gv := range []schema.GroupVersion{sandboxv1beta1.GroupVersion, v1alpha1} {
		l, err := c.resources(ctx, gv.String())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("probing %s: %w", gv, err)
		case !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == "sandboxes" }):
			continue
		case gv == v1alpha1:
			return ErrV1alpha1Only
		}
		c.probed.Store(true)
		return nil
	}
	return ErrNotInstalled
}

// resources asks discovery for the resources of gv, until ctx is done.
// Discovery takes a context from client-go v0.37 on; the driver supports
// v0.36, where the request runs on after ctx is done, bounded by the
// stack's per-attempt timeout, but the caller (a Ctrl-C) does not wait.
func (c *Core) resources(ctx context.Context, gv string) (*metav1.APIResourceList, error) {
	d := c.Sandboxes.Discovery()
	if d, ok := d.(interface {
		ServerResourcesForGroupVersionWithContext(context.Context, string) (*metav1.APIResourceList, error)
	}); ok {
		return d.ServerResourcesForGroupVersionWithContext(ctx, gv)
	}
	type answer struct {
		l   *metav1.APIResourceList
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := d.ServerResourcesForGroupVersion(gv)
		done <- answer{l, err}
	}()
	select {
	case a := <-done:
		return a.l, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Warn records a Warning Event about s; false when it was dropped, over
// the event limit or after Close.
func (c *Core) Warn(s Sandbox, reason, action, note string) bool {
	return c.events.warn(s, reason, action, note)
}

// Close stops the Event recorder.
func (c *Core) Close() { c.events.shutdown() }

// Limit checks the qps and burst given to the option named option (such
// as "driver: WithEventLimit") and returns the qps as rate.Limiter takes
// it. qps must be positive and burst at least 1: a limit of 0 lets the
// first burst through and then nothing ever again, and a burst of 0
// refuses everything. rate.Limiter knows only rate.Inf as no limit; +Inf
// would make NaN tokens.
func Limit(option string, qps float64, burst int) (float64, error) {
	switch {
	case !(qps > 0):
		return 0, fmt.Errorf("%s qps must be positive, got %v", option, qps)
	case burst < 1:
		return 0, fmt.Errorf("%s burst must be at least 1, got %d", option, burst)
	}
	return min(qps, float64(rate.Inf)), nil
}

// View converts an informer's Sandbox object, or returns the view a
// [Lean] cache entry holds.
func View(o any) (Sandbox, bool) {
	if e, ok := o.(*cached); ok {
		return e.view, true
	}
	if s, ok := o.(*sandboxv1beta1.Sandbox); ok {
		return fromV1beta1(s), true
	}
	return Sandbox{}, false
}

// Lean is the reconciler's informer transform: it replaces a Sandbox with
// the view the reconciler decides from, without the conditions
// it derived the phase from and the reconciler does not read, and without
// the rest of the object (managedFields, the pod template, other
// annotations). The driver's operations read the API server, never this
// cache.
func Lean(o any) (any, error) {
	if _, lean := o.(*cached); lean {
		// client-go may transform an object twice (watch-list).
		return o, nil
	}
	s, ok := View(o)
	if !ok {
		return o, nil
	}
	s.Conditions = nil
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
