package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
)

// Group is the agent-sandbox API group.
const Group = "agents.x-k8s.io"

// Defaults.
const (
	DefaultDriverName = "kubewire-driver"
	DefaultFenceName  = "sandbox-workload-fence"
	DefaultPageSize   = 500
	// maxConflicts bounds re-reads after 409 Conflict in one operation.
	maxConflicts = 5
)

// Option configures [New].
type Option interface {
	apply(*options) error
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	driverName string
	fenceName  string
	pageSize   int64
	logger     logr.Logger
	adapter    []kubeadapter.Option
	now        func() time.Time
}

// WithDriverName sets the value of the app.kubernetes.io/managed-by label.
// Default: [DefaultDriverName]. Must be a valid label value.
func WithDriverName(name string) Option {
	return optionFunc(func(o *options) error {
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
			return fmt.Errorf("driver: WithDriverName %q is not a valid label value", name)
		}
		o.driverName = name
		return nil
	})
}

// WithFenceName sets the name of each namespace's fence NetworkPolicy.
// Default: [DefaultFenceName]. Must be a DNS subdomain.
func WithFenceName(name string) Option {
	return optionFunc(func(o *options) error {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("driver: WithFenceName %q is not a valid object name", name)
		}
		o.fenceName = name
		return nil
	})
}

// WithPageSize sets the page size of list calls. Default:
// [DefaultPageSize]. Must be positive.
func WithPageSize(n int64) Option {
	return optionFunc(func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("driver: WithPageSize must be positive, got %d", n)
		}
		o.pageSize = n
		return nil
	})
}

// WithLogger sets the driver's logger; the kubewire stack under it logs
// there too. Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(o *options) error {
		o.logger = l
		return nil
	})
}

// WithAdapterOptions passes options to kubeadapter.Apply, for example
// kubeadapter.WithTimeout. Default: kubeadapter's.
func WithAdapterOptions(opts ...kubeadapter.Option) Option {
	return optionFunc(func(o *options) error {
		o.adapter = append(o.adapter, opts...)
		return kubeadapter.Check(opts...)
	})
}

// Driver manages the Sandboxes of one gateway in a set of namespaces. It
// is safe for concurrent use.
type Driver struct {
	gateway    string
	namespaces []string
	known      map[string]bool
	opts       options
	dyn        dynamic.Interface
	kube       kubernetes.Interface

	mu      sync.Mutex
	version string // served Sandbox version, probed once
}

// New returns a driver for gateway's sandboxes in namespaces, with clients
// built from a copy of cfg through kubeadapter.Apply. gateway must be a
// valid label value and namespaces valid namespace names; the error names
// the bad one.
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
	d := &Driver{gateway: gateway, known: map[string]bool{}}
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
	d.opts = options{driverName: DefaultDriverName, fenceName: DefaultFenceName, pageSize: DefaultPageSize, logger: logr.Discard(), now: time.Now}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&d.opts); err != nil {
			return nil, err
		}
	}
	rc := rest.CopyConfig(cfg)
	if err := kubeadapter.Apply(rc, append([]kubeadapter.Option{kubeadapter.WithLogger(d.opts.logger)}, d.opts.adapter...)...); err != nil {
		return nil, err
	}
	var err error
	if d.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	if d.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	return d, nil
}

// Namespaces returns the namespaces the driver serves.
func (d *Driver) Namespaces() []string { return append([]string(nil), d.namespaces...) }

func (d *Driver) selector() string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: d.opts.driverName, LabelGateway: d.gateway}).String()
}

func (d *Driver) owns(u *unstructured.Unstructured) bool {
	l := u.GetLabels()
	return l[LabelManagedBy] == d.opts.driverName && l[LabelGateway] == d.gateway
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

// gvr returns the served Sandbox resource, probing the API once: v1beta1,
// or v1alpha1 when the API server answers 404 for v1beta1. A failed probe is
// not remembered.
func (d *Driver) gvr(ctx context.Context) (schema.GroupVersionResource, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.version == "" {
		for _, v := range []string{"v1beta1", "v1alpha1"} {
			err := d.kube.Discovery().RESTClient().Get().AbsPath("/apis", Group, v).Do(ctx).Error()
			if err == nil {
				d.version = v
				break
			}
			if !apierrors.IsNotFound(err) {
				return schema.GroupVersionResource{}, fmt.Errorf("probing %s/%s: %w", Group, v, err)
			}
		}
		if d.version == "" {
			return schema.GroupVersionResource{}, &Error{Op: "probe", Kind: KindNotFound, Err: fmt.Errorf("the API server serves neither %s/v1beta1 nor %s/v1alpha1 sandboxes", Group, Group)}
		}
	}
	return schema.GroupVersionResource{Group: Group, Version: d.version, Resource: "sandboxes"}, nil
}

func (d *Driver) sandboxes(ctx context.Context, ns string) (dynamic.ResourceInterface, string, error) {
	gvr, err := d.gvr(ctx)
	if err != nil {
		return nil, "", err
	}
	return d.dyn.Resource(gvr).Namespace(ns), gvr.Version, nil
}

// CreateSpec is what a caller chooses about a new sandbox.
type CreateSpec struct {
	// PodTemplate becomes spec.podTemplate; optional.
	PodTemplate map[string]any
}

// Create ensures the namespace's fence exists, and creates the sandbox,
// running, with the fence's (uid, generation) recorded.
func (d *Driver) Create(ctx context.Context, ns, name string, spec CreateSpec) (Sandbox, error) {
	const op = "create"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	fence, err := d.ensureFence(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	client, version, err := d.sandboxes(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + version,
		"kind":       "Sandbox",
		"metadata": map[string]any{
			"name":      name,
			"namespace": ns,
			"labels":    map[string]any{LabelManagedBy: d.opts.driverName, LabelGateway: d.gateway},
			"annotations": map[string]any{
				AnnotationFenceUID:        string(fence.UID),
				AnnotationFenceGeneration: strconv.FormatInt(fence.Generation, 10),
				AnnotationBootstrap:       d.opts.now().UTC().Format(time.RFC3339),
			},
		},
		"spec": runningSpec(version, true),
	}}
	if spec.PodTemplate != nil {
		u.Object["spec"].(map[string]any)["podTemplate"] = spec.PodTemplate
	}
	out, err := client.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return fromUnstructured(out), nil
}

func runningSpec(version string, running bool) map[string]any {
	if version == "v1alpha1" {
		r := int64(0)
		if running {
			r = 1
		}
		return map[string]any{"replicas": r}
	}
	mode := "Suspended"
	if running {
		mode = "Running"
	}
	return map[string]any{"operatingMode": mode}
}

// suspendPatch sets the intent to Suspended and ends any bootstrap.
func suspendPatch(version string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnotationBootstrap: nil}},
		"spec":     runningSpec(version, false),
	}
}

// Get returns the sandbox.
func (d *Driver) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "get"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	u, err := d.get(ctx, op, ns, name)
	if err != nil {
		return Sandbox{}, err
	}
	return fromUnstructured(u), nil
}

func (d *Driver) get(ctx context.Context, op, ns, name string) (*unstructured.Unstructured, error) {
	client, _, err := d.sandboxes(ctx, ns)
	if err != nil {
		return nil, wrap(op, ns, name, err)
	}
	u, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, wrap(op, ns, name, err)
	}
	if !d.owns(u) {
		return nil, &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: fmt.Errorf("sandbox is not managed by %s for gateway %s", d.opts.driverName, d.gateway)}
	}
	return u, nil
}

// List returns the gateway's sandboxes in ns, reading every page.
func (d *Driver) List(ctx context.Context, ns string) ([]Sandbox, error) {
	const op = "list"
	if err := d.validateNamespace(op, ns, ""); err != nil {
		return nil, err
	}
	return d.list(ctx, ns)
}

func (d *Driver) list(ctx context.Context, ns string) ([]Sandbox, error) {
	client, _, err := d.sandboxes(ctx, ns)
	if err != nil {
		return nil, wrap("list", ns, "", err)
	}
	var out []Sandbox
	opts := metav1.ListOptions{LabelSelector: d.selector(), Limit: d.opts.pageSize}
	for {
		page, err := client.List(ctx, opts)
		if err != nil {
			return nil, wrap("list", ns, "", err)
		}
		for i := range page.Items {
			out = append(out, fromUnstructured(&page.Items[i]))
		}
		if page.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = page.GetContinue()
	}
}

// Stop suspends the sandbox: its intent becomes Suspended and the
// controller removes its pod. Stopping a stopped sandbox sends nothing.
func (d *Driver) Stop(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "stop"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	ctx = retry.WithIdempotent(ctx)
	return d.update(ctx, op, ns, name, nil, func(s Sandbox, version string) map[string]any {
		if !s.Running && s.BootstrapStarted.IsZero() {
			return nil
		}
		return suspendPatch(version)
	})
}

// Start reads the namespace's fence (creating it if it is missing), records
// its current (uid, generation) on the sandbox and sets it running. Starting
// a running sandbox admitted under the current fence sends nothing.
func (d *Driver) Start(ctx context.Context, ns, name string) (Sandbox, error) {
	const op = "start"
	if err := d.validate(op, ns, name); err != nil {
		return Sandbox{}, err
	}
	fence, err := d.ensureFence(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	return d.update(ctx, op, ns, name, nil, func(s Sandbox, version string) map[string]any {
		if s.Running && s.Fence == fence {
			return nil
		}
		return map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{
				AnnotationFenceUID:        string(fence.UID),
				AnnotationFenceGeneration: strconv.FormatInt(fence.Generation, 10),
				AnnotationBootstrap:       d.opts.now().UTC().Format(time.RFC3339),
			}},
			"spec": runningSpec(version, true),
		}
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
	ctx = retry.WithIdempotent(ctx)
	u, err := d.get(ctx, op, ns, name)
	if err != nil {
		return err
	}
	client, _, err := d.sandboxes(ctx, ns)
	if err != nil {
		return wrap(op, ns, name, err)
	}
	uid := u.GetUID()
	err = client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return &Error{Op: op, Namespace: ns, Name: name, Kind: KindPrecondition, Err: err}
	}
	return wrap(op, ns, name, err)
}

// update applies the merge patch that decide returns for the current state
// of the sandbox, guarded by its resourceVersion. current, if not nil, is
// the state to start from (a listed object); otherwise it is read. On 409
// Conflict it reads again and decides again. A nil patch means nothing to
// change; nothing is sent.
func (d *Driver) update(ctx context.Context, op, ns, name string, current *Sandbox, decide func(Sandbox, string) map[string]any) (Sandbox, error) {
	client, version, err := d.sandboxes(ctx, ns)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	for i := 0; i < maxConflicts; i++ {
		var s Sandbox
		if current != nil && i == 0 {
			s = *current
		} else {
			u, err := d.get(ctx, op, ns, name)
			if err != nil {
				return Sandbox{}, err
			}
			s = fromUnstructured(u)
		}
		patch := decide(s, version)
		if patch == nil {
			return s, nil
		}
		meta, _ := patch["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			patch["metadata"] = meta
		}
		meta["resourceVersion"] = s.ResourceVersion
		body, err := json.Marshal(patch)
		if err != nil {
			return Sandbox{}, wrap(op, ns, name, err)
		}
		out, err := client.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return Sandbox{}, wrap(op, ns, name, err)
		}
		return fromUnstructured(out), nil
	}
	return Sandbox{}, &Error{Op: op, Namespace: ns, Name: name, Kind: KindConflict, Err: fmt.Errorf("the sandbox changed %d times while it was being updated", maxConflicts)}
}

// readFence reads the live fence of ns. A 404 is an answer (the fence is
// absent); any other failure leaves it unknown.
func (d *Driver) readFence(ctx context.Context, ns string) (LiveFence, error) {
	np, err := d.kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, d.opts.fenceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return LiveFence{Known: true}, nil
	case err != nil:
		return LiveFence{}, err
	}
	return LiveFence{Known: true, Present: true, Fence: Fence{UID: np.UID, Generation: np.Generation}}, nil
}

// ensureFence returns the fence of ns, creating it if it is absent.
func (d *Driver) ensureFence(ctx context.Context, ns string) (Fence, error) {
	live, err := d.readFence(ctx, ns)
	if err != nil {
		return Fence{}, err
	}
	if live.Present {
		return live.Fence, nil
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: d.opts.fenceName, Namespace: ns, Labels: map[string]string{LabelManagedBy: d.opts.driverName}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	created, err := d.kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		live, err = d.readFence(ctx, ns)
		if err != nil {
			return Fence{}, err
		}
		if !live.Present {
			return Fence{}, fmt.Errorf("fence %s/%s was created and removed concurrently", ns, d.opts.fenceName)
		}
		return live.Fence, nil
	}
	if err != nil {
		return Fence{}, err
	}
	return Fence{UID: created.UID, Generation: created.Generation}, nil
}

// event records a Warning Event on the sandbox.
func (d *Driver) event(ctx context.Context, s Sandbox, version, reason, message string) error {
	now := metav1.NewTime(d.opts.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: s.Name + ".", Namespace: s.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: Group + "/" + version, Kind: "Sandbox",
			Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion,
		},
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: d.opts.driverName},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	_, err := d.kube.CoreV1().Events(s.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
