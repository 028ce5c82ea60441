package driver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/kubeadapter"
)

// Driver manages the Sandboxes of one gateway in a set of namespaces. It
// is safe for concurrent use. Close it to stop its Event recorder.
type Driver struct {
	gateway    string
	namespaces []string
	known      map[string]bool
	opts       options
	sandboxCS  versioned.Interface
	kube       kubernetes.Interface
	events     *recorder

	mu     sync.Mutex
	client sandboxClient // for the served version, probed once
}

// New returns a driver for gateway's sandboxes in namespaces, with clients
// built from a copy of cfg through kubeadapter.Apply. gateway must be a
// valid label value and namespaces valid namespace names; the error names
// the bad one.
//
// A config that leaves QPS at 0 and has no RateLimiter, as one from a
// kubeconfig or from the cluster does, gets clients without client-side
// throttling, as controller-runtime's GetConfig gives: client-go would
// otherwise allow 5 requests a second, and a fence change over 60
// sandboxes would take 12 seconds to suspend them. The API server's
// Priority and Fairness then bounds the rate, and the reconciler's workers
// the writes in flight. A QPS the caller set, or a RateLimiter, is kept.
func New(cfg *rest.Config, gateway string, namespaces []string, opts ...Option) (*Driver, error) {
	if cfg == nil {
		return nil, errors.New("driver: New: nil *rest.Config")
	}
	if errs := validation.IsValidLabelValue(gateway); len(errs) > 0 || gateway == "" {
		return nil, fmt.Errorf("driver: gateway %q is not a valid label value", gateway)
	}
	if len(namespaces) == 0 {
		return nil, errors.New("driver: namespaces must not be empty")
	}
	d := &Driver{gateway: gateway, known: map[string]bool{}, opts: defaultOptions()}
	for _, ns := range namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("driver: namespace %q is not a valid namespace name", ns)
		}
		if !d.known[ns] {
			d.known[ns] = true
			d.namespaces = append(d.namespaces, ns)
		}
	}
	sort.Strings(d.namespaces)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&d.opts); err != nil {
			return nil, err
		}
	}
	if len(d.opts.adapter) > 0 && kubeadapter.Applied(cfg) {
		return nil, errors.New("driver: WithAdapterOptions cannot apply: the rest.Config already carries kubeadapter's stack, whose options stay; give them to that kubeadapter.Apply, or give New the config without it")
	}
	rc := rest.CopyConfig(cfg)
	if rc.QPS == 0 && rc.RateLimiter == nil {
		rc.QPS = -1
	}
	if err := kubeadapter.Apply(rc, append([]kubeadapter.Option{kubeadapter.WithLogger(d.opts.logger)}, d.opts.adapter...)...); err != nil {
		return nil, err
	}
	// One HTTP client, and so one pool, for both clientsets.
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	if d.sandboxCS, err = versioned.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	if d.kube, err = kubernetes.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	// Events get a client of their own, as the kubelet's do, limited to
	// the event limit: they never wait behind the writes they explain.
	ec := rest.CopyConfig(rc)
	ec.QPS, ec.Burst, ec.RateLimiter = float32(d.opts.eventQPS), d.opts.eventBurst, nil
	if d.opts.eventQPS == float64(rate.Inf) {
		ec.QPS = -1
	}
	events, err := kubernetes.NewForConfigAndClient(ec, hc)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	d.events = newRecorder(events, d.opts.driverName, rate.NewLimiter(rate.Limit(d.opts.eventQPS), d.opts.eventBurst), d.opts.logger)
	return d, nil
}

// Close stops the driver's Event recorder and cancels the Event writes
// under way. The driver's operations keep working; Events recorded after
// Close are dropped. It leaves the connections to the pool they belong
// to: client-go shares one transport between every client of the same TLS
// settings, and middleware never empties it.
func (d *Driver) Close() { d.events.shutdown() }

// Namespaces returns the namespaces the driver serves.
func (d *Driver) Namespaces() []string { return append([]string(nil), d.namespaces...) }

func (d *Driver) selector() string {
	return labels.SelectorFromSet(d.ownLabels()).String()
}

func (d *Driver) ownLabels() labels.Set {
	return labels.Set{LabelManagedBy: d.opts.driverName, LabelGateway: d.gateway}
}

func (d *Driver) owns(labels map[string]string) bool {
	return labels[LabelManagedBy] == d.opts.driverName && labels[LabelGateway] == d.gateway
}

func (d *Driver) validateNamespace(op, ns, name string) *Error {
	if !d.known[ns] {
		return invalid(op, ns, name, "unknown namespace %q: the driver serves %v", ns, d.namespaces)
	}
	return nil
}

func (d *Driver) validate(op, ns, name string) *Error {
	if err := d.validateNamespace(op, ns, name); err != nil {
		return err
	}
	if name == "" {
		return invalid(op, ns, name, "empty sandbox name")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return invalid(op, ns, name, "sandbox name %q is not a DNS label: %s", name, errs[0])
	}
	return nil
}

// sandboxes returns the client of the served Sandbox version, probing the
// API once: v1beta1 (agent-sandbox v0.5.0 and later), or v1alpha1 when the
// API server answers 404 for v1beta1 (v0.4.x and earlier). A failed probe
// is not remembered.
func (d *Driver) sandboxes(ctx context.Context) (sandboxClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil {
		return d.client, nil
	}
	for _, gv := range []schema.GroupVersion{sandboxv1beta1.GroupVersion, sandboxv1alpha1.GroupVersion} {
		err := d.sandboxCS.Discovery().RESTClient().Get().AbsPath("/apis", gv.Group, gv.Version).Do(ctx).Error()
		if err == nil {
			d.client = newSandboxClient(d.sandboxCS, gv.Version)
			return d.client, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("probing %s: %w", gv, err)
		}
	}
	return nil, &Error{Op: "probe", Kind: KindNotFound, Err: fmt.Errorf("the API server serves neither %s nor %s sandboxes; is agent-sandbox installed?", sandboxv1beta1.GroupVersion, sandboxv1alpha1.GroupVersion)}
}
