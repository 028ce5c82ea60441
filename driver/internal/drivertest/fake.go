package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sandboxfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/kubewire/kubewire/driver"
)

// Fake is a driver's world on client-go's fake clientsets: agent-sandbox's
// generated fake for the sandboxes, client-go's for the rest. One reactor
// adds what the driver's guarded patch relies on and the fake tracker
// leaves out: a merge patch whose metadata.resourceVersion is not the
// stored one is refused with 409 Conflict, and an applied one bumps the
// resourceVersion (and the generation when the spec changed), as the API
// server does. The fake serves Version only, v1beta1 unless [Fake.Serve]
// says otherwise: a request of another version is answered 404, as an API
// server without it answers.
type Fake struct {
	Version   string
	Sandboxes *sandboxfake.Clientset
	Kube      *kubefake.Clientset

	mu sync.Mutex
	rv int
}

// NewFake returns an empty fake serving v1beta1.
func NewFake(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{Sandboxes: sandboxfake.NewSimpleClientset(), Kube: kubefake.NewSimpleClientset(), rv: 100}
	f.Serve(sandboxv1beta1.GroupVersion.Version)
	f.Sandboxes.PrependReactor("*", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if v := a.GetResource().Version; v != f.Version {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
		}
		return false, nil, nil
	})
	f.Sandboxes.PrependReactor("patch", "sandboxes", f.patch)
	// The tracker stores a created object's resourceVersion as given:
	// empty, which no patch guard would compare.
	f.Sandboxes.PrependReactor("create", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok {
			m.SetResourceVersion(f.nextRV())
		}
		return false, nil, nil
	})
	return f
}

// Serve makes f serve Sandboxes as version only, and its discovery list
// them: "v1alpha1", as agent-sandbox v0.4.x does, or "" for none, as an
// API server without agent-sandbox. Call it before the clients are used.
func (f *Fake) Serve(version string) {
	f.Version = version
	f.Sandboxes.Resources = nil
	if version != "" {
		f.Sandboxes.Resources = []*metav1.APIResourceList{{
			GroupVersion: sandboxv1beta1.GroupVersion.Group + "/" + version,
			APIResources: []metav1.APIResource{{Name: "sandboxes", Namespaced: true, Kind: "Sandbox"}},
		}}
	}
}

// Driver returns a driver for namespaces team-a and team-b on f, logging
// to l if it is not nil.
func (f *Fake) Driver(t testing.TB, l *Logs, opts ...driver.Option) *driver.Driver {
	t.Helper()
	if l != nil {
		opts = append([]driver.Option{driver.WithLogger(l.Logger())}, opts...)
	}
	d, err := driver.NewForClients(f.Sandboxes, f.Kube, "gw", []string{"team-a", "team-b"}, opts...)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

func (f *Fake) nextRV() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	return strconv.Itoa(f.rv)
}

// patch applies a JSON merge patch of a sandbox as the API server does.
func (f *Fake) patch(a k8stesting.Action) (bool, runtime.Object, error) {
	p := a.(k8stesting.PatchAction)
	if p.GetPatchType() != types.MergePatchType || p.GetResource().Version != f.Version {
		return false, nil, nil
	}
	gvr, ns, name := p.GetResource(), p.GetNamespace(), p.GetName()
	tracker := f.Sandboxes.Tracker()
	obj, err := tracker.Get(gvr, ns, name)
	if err != nil {
		return true, nil, err
	}
	var guard struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	if err := json.Unmarshal(p.GetPatch(), &guard); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	old := obj.(metav1.Object)
	if rv := guard.Metadata.ResourceVersion; rv != "" && rv != old.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	cur, err := json.Marshal(obj)
	if err != nil {
		return true, nil, err
	}
	merged, err := jsonpatch.MergePatch(cur, p.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(merged, out); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	m := out.(metav1.Object)
	m.SetResourceVersion(f.nextRV())
	if !reflect.DeepEqual(spec(obj), spec(out)) {
		m.SetGeneration(old.GetGeneration() + 1)
	}
	if err := tracker.Update(gvr, out, ns); err != nil {
		return true, nil, err
	}
	return true, out, nil
}

func spec(o runtime.Object) any {
	if s, ok := o.(*sandboxv1beta1.Sandbox); ok {
		return s.Spec
	}
	return nil
}

// AddFence stores ns's fence policy with uid and generation gen, or
// replaces it.
func (f *Fake) AddFence(t testing.TB, ns, uid string, gen int64) {
	t.Helper()
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: FenceName, Namespace: ns, UID: types.UID(uid), Generation: gen, ResourceVersion: f.nextRV()}}
	gvr := networkingv1.SchemeGroupVersion.WithResource("networkpolicies")
	if _, err := f.Kube.Tracker().Get(gvr, ns, FenceName); err == nil {
		require.NoError(t, f.Kube.Tracker().Update(gvr, np, ns))
		return
	}
	require.NoError(t, f.Kube.Tracker().Create(gvr, np, ns))
}

// AddSandbox stores a sandbox owned by gateway "gw" admitted under fence
// (uid, gen), running or suspended, with the conditions the real
// controllers (v0.5.4 and later) write.
func (f *Fake) AddSandbox(t testing.TB, ns, name string, running bool, fenceUID string, fenceGen int64) {
	t.Helper()
	meta := metav1.ObjectMeta{
		Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: f.nextRV(),
		Labels:      map[string]string{driver.LabelManagedBy: DriverName, driver.LabelGateway: "gw"},
		Annotations: map[string]string{AnnFenceUID: fenceUID, AnnFenceGen: strconv.FormatInt(fenceGen, 10)},
	}
	cond := func(typ, status, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: reason, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))}
	}
	o := &sandboxv1beta1.Sandbox{ObjectMeta: meta}
	o.Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeRunning
	o.Status.Conditions = []metav1.Condition{cond("Suspended", "False", sandboxv1beta1.SandboxReasonNotSuspended), cond("Ready", "True", sandboxv1beta1.SandboxReasonDependenciesReady)}
	if !running {
		o.Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeSuspended
		o.Status.Conditions = []metav1.Condition{cond("Suspended", "True", sandboxv1beta1.SandboxReasonSuspendedPodTerminated), cond("Ready", "False", sandboxv1beta1.SandboxReasonSuspended)}
	}
	require.NoError(t, f.Sandboxes.Tracker().Create(f.resource(), o, ns))
}

// Count returns how many requests of verb on resource the clients sent,
// for example Count("patch", "sandboxes").
func (f *Fake) Count(verb, resource string) int {
	n := 0
	for _, a := range append(f.Sandboxes.Actions(), f.Kube.Actions()...) {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// Mutations counts the creates, updates, patches and deletes sent, Events
// included.
func (f *Fake) Mutations() int {
	n := 0
	for _, a := range append(f.Sandboxes.Actions(), f.Kube.Actions()...) {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			n++
		}
	}
	return n
}

// Actions returns the requests of verb on resource the clients sent:
// agent-sandbox's clientset's, then client-go's, each in order.
func (f *Fake) Actions(verb, resource string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range append(f.Sandboxes.Actions(), f.Kube.Actions()...) {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			out = append(out, a)
		}
	}
	return out
}

// Requests counts every request the clients sent.
func (f *Fake) Requests() int { return len(f.Sandboxes.Actions()) + len(f.Kube.Actions()) }

// Limits returns the limit of each list of sandboxes sent, in order: one
// a page.
func (f *Fake) Limits() []int64 {
	var out []int64
	for _, a := range f.Actions("list", "sandboxes") {
		if l, ok := a.(k8stesting.ListActionImpl); ok {
			out = append(out, l.ListOptions.Limit)
		}
	}
	return out
}

// Running reports the intent of the stored sandbox ns/name:
// spec.operatingMode Running. It may be called from any goroutine.
func (f *Fake) Running(ns, name string) (bool, error) {
	o, err := f.Sandboxes.Tracker().Get(f.resource(), ns, name)
	if err != nil {
		return false, err
	}
	s, ok := o.(*sandboxv1beta1.Sandbox)
	if !ok {
		return false, fmt.Errorf("drivertest: %s/%s is a %T, not a sandbox", ns, name, o)
	}
	return s.Spec.OperatingMode != sandboxv1beta1.SandboxOperatingModeSuspended, nil
}

// Sandbox returns the stored sandbox ns/name.
func (f *Fake) Sandbox(t testing.TB, ns, name string) runtime.Object {
	t.Helper()
	o, err := f.Sandboxes.Tracker().Get(f.resource(), ns, name)
	require.NoError(t, err)
	return o
}

// resource is the v1beta1 sandboxes.
func (f *Fake) resource() schema.GroupVersionResource {
	return sandboxv1beta1.GroupVersion.WithResource("sandboxes")
}

// StaleFixture is a fake on which both namespaces' fences are at
// generation 2; every sandbox was admitted under generation 1, running or
// not.
func StaleFixture(t testing.TB, running bool) *Fake {
	f := NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddFence(t, "team-b", "fence-b", 2)
	for i := 0; i < 4; i++ {
		f.AddSandbox(t, "team-a", fmt.Sprintf("sb-%d", i), running, "fence-a", 1)
	}
	f.AddSandbox(t, "team-b", "sb-x", running, "fence-b", 1)
	return f
}

// Events returns the notes of the Events written.
func (f *Fake) Events(ctx context.Context, t testing.TB) []string {
	t.Helper()
	l, err := f.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Note)
	}
	return out
}

// Main runs the package's tests and fails them if a goroutine outlives
// them. The tests against a real API server are in the untagged module
// test/driver.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m)
}
