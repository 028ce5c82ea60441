package driver

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver/internal/core"
	"github.com/kubewire/kubewire/kubeadapter"
)

// handle gives package reconciler this driver's core (core.Of), and
// nothing outside this module.
type handle = core.Handle

// Driver manages the Sandboxes of one gateway in a set of namespaces. It
// is safe for concurrent use. Make it with [New] or [NewForClients]; the
// zero value is not usable. Close it to stop its Event recorder.
type Driver struct {
	handle
	c *core.Core
}

// New returns a driver for gateway's sandboxes in namespaces, with clients
// built from a copy of cfg through kubeadapter.Apply. gateway must be a
// valid label value and namespaces valid namespace names; the error names
// the bad one. A config that already carries kubeadapter's stack
// (kubeadapter.Applied) keeps it and its options: that is how to give the
// stack options of your own.
//
// A config that leaves QPS at 0 and has no RateLimiter, as one from a
// kubeconfig or from the cluster does, gets clients without client-side
// throttling, as controller-runtime's GetConfig gives: client-go would
// otherwise allow 5 requests a second, and a fence change over 60
// sandboxes would take 12 seconds to suspend them. The API server's
// Priority and Fairness then bounds the rate, and the reconciler's workers
// the writes in flight. A QPS the caller set, or a RateLimiter, is kept.
// Events get a client of their own, as the kubelet's do, limited to the
// event limit ([WithEventLimit]).
func New(cfg *rest.Config, gateway string, namespaces []string, opts ...Option) (*Driver, error) {
	if cfg == nil {
		return nil, errors.New("driver: New: nil *rest.Config")
	}
	s, err := settings(gateway, namespaces, opts)
	if err != nil {
		return nil, err
	}
	rc := rest.CopyConfig(cfg)
	if rc.QPS == 0 && rc.RateLimiter == nil {
		rc.QPS = -1
	}
	if err := kubeadapter.Apply(rc, kubeadapter.WithLogger(s.Log)); err != nil {
		return nil, err
	}
	// One HTTP client, and so one pool, for every clientset.
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	sandboxes, err := versioned.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	ec := rest.CopyConfig(rc)
	ec.QPS, ec.Burst, ec.RateLimiter = float32(s.EventQPS), s.EventBurst, nil
	if s.EventQPS == float64(rate.Inf) {
		ec.QPS = -1
	}
	events, err := kubernetes.NewForConfigAndClient(ec, hc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	return newDriver(core.New(s, sandboxes, kube, events)), nil
}

// NewForClients returns a driver that sends every request, Events
// included, through the clientsets given, as they are: client-go's fake
// clientsets in a test, or clients a program built itself (through
// kubeadapter.Apply, for the stack). The checks and options are [New]'s.
// The clientsets' own client-side limits apply: one built from a
// kubeconfig's config allows client-go's 5 requests a second unless its
// QPS is set (-1 for none, as [New] does).
func NewForClients(sandboxes versioned.Interface, kube kubernetes.Interface, gateway string, namespaces []string, opts ...Option) (*Driver, error) {
	switch {
	case core.IsNil(sandboxes):
		return nil, errors.New("driver: NewForClients: nil sandboxes clientset")
	case core.IsNil(kube):
		return nil, errors.New("driver: NewForClients: nil kube clientset")
	}
	s, err := settings(gateway, namespaces, opts)
	if err != nil {
		return nil, err
	}
	return newDriver(core.New(s, sandboxes, kube, kube)), nil
}

func newDriver(c *core.Core) *Driver { return &Driver{handle: core.NewHandle(c), c: c} }

// settings checks New's arguments and applies the options.
func settings(gateway string, namespaces []string, opts []Option) (core.Settings, error) {
	if errs := validation.IsValidLabelValue(gateway); len(errs) > 0 || gateway == "" {
		return core.Settings{}, fmt.Errorf("driver: gateway %q is not a valid label value", gateway)
	}
	if len(namespaces) == 0 {
		return core.Settings{}, errors.New("driver: namespaces must not be empty")
	}
	for _, ns := range namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return core.Settings{}, fmt.Errorf("driver: namespace %q is not a valid namespace name", ns)
		}
	}
	s := defaults()
	s.Gateway = gateway
	s.Namespaces = slices.Compact(slices.Sorted(slices.Values(namespaces)))
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&s); err != nil {
			return core.Settings{}, err
		}
	}
	return s, nil
}

// Close stops the driver's Event recorder and cancels the Event writes
// under way. The driver's operations keep working; Events recorded after
// Close are dropped. It leaves the connections to the pool they belong
// to: client-go shares one transport between every client of the same TLS
// settings, and middleware never empties it.
func (d *Driver) Close() { d.c.Close() }
