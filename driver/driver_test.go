package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	sandboxfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/core"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
)

func TestMain(m *testing.M) {
	drivertest.Main(m)
}

// requests counts every request the driver sent, reads included.
func requests(f *drivertest.Fake) int { return len(f.Sandboxes.Actions()) + len(f.Kube.Actions()) }

// sandboxes is the resource the driver speaks and the fake stores.
var sandboxes = sandboxv1beta1.GroupVersion.WithResource("sandboxes")

// edit changes the stored sandbox ns/name, as another client would.
func edit(t *testing.T, f *drivertest.Fake, ns, name string, change func(metav1.Object)) {
	t.Helper()
	o := f.Sandbox(t, ns, name)
	m, err := meta.Accessor(o)
	require.NoError(t, err)
	change(m)
	require.NoError(t, f.Sandboxes.Tracker().Update(sandboxes, o, ns))
}

// stored returns the view of the stored sandbox ns/name.
func stored(t *testing.T, f *drivertest.Fake, ns, name string) (running bool, ann map[string]string) {
	t.Helper()
	o, ok := f.Sandbox(t, ns, name).(*sandboxv1beta1.Sandbox)
	require.True(t, ok, "stored %T", o)
	return o.Spec.OperatingMode == sandboxv1beta1.SandboxOperatingModeRunning, o.Annotations
}

// patches returns the bodies of the sandbox merge patches sent.
func patches(t *testing.T, f *drivertest.Fake) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range f.Sandboxes.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		require.Equal(t, types.MergePatchType, p.GetPatchType())
		var body map[string]any
		require.NoError(t, json.Unmarshal(p.GetPatch(), &body))
		out = append(out, body)
	}
	return out
}

func TestInvalidInputSendsNothing(t *testing.T) {
	f := drivertest.NewFake(t)
	d := f.Driver(t, nil)
	ctx := context.Background()
	huge := strings.Repeat("a", 1<<20) + "_"
	tests := []struct {
		name      string
		call      func() error
		wantMsg   string
		notServed bool // errors.Is(err, driver.ErrNotServed)
	}{
		{name: "empty name", call: func() error { _, err := d.Get(ctx, "team-a", ""); return err }, wantMsg: "empty sandbox name"},
		{name: "not a DNS label", call: func() error { _, err := d.Stop(ctx, "team-a", "Bad_Name"); return err }, wantMsg: `sandbox name "Bad_Name" is not a DNS label`},
		{name: "dotted name", call: func() error { _, err := d.Start(ctx, "team-a", "a.b"); return err }, wantMsg: `sandbox name "a.b" is not a DNS label`},
		{name: "huge name", call: func() error { _, err := d.Stop(ctx, "team-a", huge); return err },
			wantMsg: `sandbox name "` + huge[:64] + `"... (1048577 bytes) is not a DNS label`},
		{name: "name with a newline", call: func() error { _, err := d.Stop(ctx, "team-a", "sb\nlevel=error msg=forged"); return err },
			wantMsg: `driver: stop sandbox team-a/"sb\nlevel=error msg=forged": invalid argument`},
		{name: "name cut within a character", call: func() error {
			_, err := d.Stop(ctx, "team-a", strings.Repeat("a", 63)+"é"+strings.Repeat("b", 10))
			return err
		},
			wantMsg: `sandbox name "` + strings.Repeat("a", 63) + `"... (75 bytes)`},
		{name: "unknown namespace", call: func() error { return d.Delete(ctx, "kube-system", "sb") },
			wantMsg: `unknown namespace "kube-system": the driver serves [team-a team-b]`, notServed: true},
		{name: "huge namespace", call: func() error { return d.Delete(ctx, huge, "sb") },
			wantMsg: `unknown namespace "` + huge[:64] + `"... (1048577 bytes)`, notServed: true},
		{name: "unknown namespace on create", call: func() error {
			_, err := d.Create(ctx, "other", "sb", drivertest.AgentPod)
			return err
		}, wantMsg: `unknown namespace "other"`, notServed: true},
		{name: "bad name on create", call: func() error {
			_, err := d.Create(ctx, "team-a", "-sb", drivertest.AgentPod)
			return err
		}, wantMsg: `sandbox name "-sb" is not a DNS label`},
		{name: "unknown namespace on list", call: func() error { _, err := d.List(ctx, "other"); return err }, wantMsg: `unknown namespace "other"`, notServed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.Equal(t, driver.KindInvalidArgument, driver.KindOf(err))
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Less(t, len(err.Error()), 512, "the error repeats a value the caller sent whole")
			assert.Equal(t, tt.notServed, errors.Is(err, driver.ErrNotServed), "errors.Is(err, ErrNotServed)")
		})
	}
	assert.Zero(t, requests(f), "invalid input reached the API server")
}

// TestCreateRejectsBadTemplate: what the Sandbox CRD would reject fails
// before anything is sent, naming the field and the value.
func TestCreateRejectsBadTemplate(t *testing.T) {
	f := drivertest.NewFake(t)
	d := f.Driver(t, nil)
	ctr := func(names ...string) sandboxv1beta1.PodTemplate {
		var tmpl sandboxv1beta1.PodTemplate
		for _, n := range names {
			tmpl.Spec.Containers = append(tmpl.Spec.Containers, corev1.Container{Name: n, Image: "busybox"})
		}
		return tmpl
	}
	tests := []struct {
		name    string
		give    sandboxv1beta1.PodTemplate
		wantMsg string
	}{
		{"no pod template", sandboxv1beta1.PodTemplate{}, "spec.podTemplate.spec.containers: required"},
		{"unnamed container", ctr(""), `spec.podTemplate.spec.containers[0].name: "" is not a DNS label`},
		{"bad container name", ctr("agent", "Side_Car"), `spec.podTemplate.spec.containers[1].name: "Side_Car" is not a DNS label`},
		{"duplicate container", ctr("agent", "agent"), `spec.podTemplate.spec.containers[1].name: duplicate container name "agent"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Create(context.Background(), "team-a", "sb", tt.give)
			require.Error(t, err)
			assert.Equal(t, driver.KindInvalidArgument, driver.KindOf(err))
			assert.ErrorContains(t, err, "driver: create sandbox team-a/sb: invalid argument: "+tt.wantMsg)
		})
	}
	assert.Zero(t, f.Mutations(), "bad input was written")
	assert.Zero(t, requests(f), "bad input reached the API server")
}

// TestCreate: the sandbox is created running, labelled as the gateway's,
// with the given template and admitted under the namespace's fence.
func TestCreate(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	d := f.Driver(t, nil)
	s, err := d.Create(context.Background(), "team-a", "sb", drivertest.AgentPod)
	require.NoError(t, err)
	assert.Equal(t, driver.Sandbox{
		Namespace: "team-a", Name: "sb", Running: true, Phase: driver.PhaseStarting,
		FenceUID: "fence-a", FenceGeneration: 2,
	}, s)
	o, ok := f.Sandbox(t, "team-a", "sb").(*sandboxv1beta1.Sandbox)
	require.True(t, ok, "stored %T", o)
	assert.Equal(t, map[string]string{driver.LabelManagedBy: drivertest.DriverName, driver.LabelGateway: "gw"}, o.Labels)
	assert.Equal(t, "fence-a", o.Annotations[drivertest.AnnFenceUID])
	assert.Equal(t, "2", o.Annotations[drivertest.AnnFenceGen])
	_, err = time.Parse(time.RFC3339, o.Annotations[drivertest.AnnBootstrap])
	assert.NoError(t, err, "the bootstrap mark")
	assert.Equal(t, drivertest.AgentPod, o.Spec.PodTemplate)
	assert.Equal(t, sandboxv1beta1.SandboxOperatingModeRunning, o.Spec.OperatingMode)
	assert.Zero(t, f.Count("create", "networkpolicies"), "the fence exists")

	_, err = d.Create(context.Background(), "team-a", "sb", drivertest.AgentPod)
	assert.Equal(t, driver.KindAlreadyExists, driver.KindOf(err), "%v", err)
}

// TestCreateMakesTheFence: a namespace without a fence gets one that
// denies every pod's egress, and the sandbox is admitted under it.
func TestCreateMakesTheFence(t *testing.T) {
	f := drivertest.NewFake(t)
	// The API server assigns the uid and the first generation.
	f.Kube.PrependReactor("create", "networkpolicies", func(a k8stesting.Action) (bool, runtime.Object, error) {
		np := a.(k8stesting.CreateAction).GetObject().(*networkingv1.NetworkPolicy)
		np.UID, np.Generation = "fence-new", 1
		return false, nil, nil
	})
	d := f.Driver(t, nil)
	s, err := d.Create(context.Background(), "team-b", "sb", drivertest.AgentPod)
	require.NoError(t, err)
	assert.Equal(t, types.UID("fence-new"), s.FenceUID)
	assert.EqualValues(t, 1, s.FenceGeneration)
	np, err := f.Kube.NetworkingV1().NetworkPolicies("team-b").Get(context.Background(), drivertest.FenceName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{driver.LabelManagedBy: drivertest.DriverName}, np.Labels)
	assert.Equal(t, networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}, np.Spec, "no egress rule: every pod's egress denied")
}

// TestNewForClients: the clientsets and the arguments are checked, and
// the error names the bad value.
func TestNewForClients(t *testing.T) {
	sb, kube := sandboxfake.NewSimpleClientset(), kubefake.NewSimpleClientset()
	tests := []struct {
		name       string
		sandboxes  versioned.Interface
		kube       kubernetes.Interface
		gateway    string
		namespaces []string
		opts       []driver.Option
		wantErr    string
	}{
		{name: "nil sandbox clientset", kube: kube, gateway: "gw", namespaces: []string{"a"}, wantErr: "driver: NewForClients: nil sandboxes clientset"},
		{name: "nil kube clientset", sandboxes: sb, gateway: "gw", namespaces: []string{"a"}, wantErr: "driver: NewForClients: nil kube clientset"},
		{name: "typed nil kube clientset", sandboxes: sb, kube: (*kubernetes.Clientset)(nil), gateway: "gw", namespaces: []string{"a"}, wantErr: "driver: NewForClients: nil kube clientset"},
		{name: "empty gateway", sandboxes: sb, kube: kube, namespaces: []string{"a"}, wantErr: `driver: gateway "" is not a valid label value`},
		{name: "bad gateway", sandboxes: sb, kube: kube, gateway: "gw/1", namespaces: []string{"a"}, wantErr: `driver: gateway "gw/1" is not a valid label value`},
		{name: "no namespaces", sandboxes: sb, kube: kube, gateway: "gw", wantErr: "driver: namespaces must not be empty"},
		{name: "bad namespace", sandboxes: sb, kube: kube, gateway: "gw", namespaces: []string{"a", "Team_B"}, wantErr: `driver: namespace "Team_B" is not a valid namespace name`},
		{name: "bad option", sandboxes: sb, kube: kube, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithFenceName("Fence!")}, wantErr: `driver: WithFenceName "Fence!" is not a valid object name`},
		{name: "valid", sandboxes: sb, kube: kube, gateway: "gw", namespaces: []string{"b", "a", "b"}, opts: []driver.Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := driver.NewForClients(tt.sandboxes, tt.kube, tt.gateway, tt.namespaces, tt.opts...)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				assert.Nil(t, d)
				return
			}
			require.NoError(t, err)
			d.Close()
		})
	}
	assert.Empty(t, sb.Actions())
	assert.Empty(t, kube.Actions(), "construction sends nothing")
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	tests := []struct {
		name       string
		cfg        *rest.Config
		gateway    string
		namespaces []string
		opts       []driver.Option
		wantErr    string
	}{
		{name: "nil config", gateway: "gw", namespaces: []string{"a"}, wantErr: "driver: New: nil *rest.Config"},
		{name: "empty gateway", cfg: cfg, namespaces: []string{"a"}, wantErr: `driver: gateway "" is not a valid label value`},
		{name: "no namespaces", cfg: cfg, gateway: "gw", wantErr: "driver: namespaces must not be empty"},
		{name: "bad namespace", cfg: cfg, gateway: "gw", namespaces: []string{"Team_A"}, wantErr: `driver: namespace "Team_A" is not a valid namespace name`},
		{name: "bad driver name", cfg: cfg, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithDriverName("")}, wantErr: `driver: WithDriverName "" is not a valid label value`},
		{name: "bad fence name", cfg: cfg, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithFenceName("Fence_A")}, wantErr: `driver: WithFenceName "Fence_A" is not a valid object name`},
		{name: "event burst 0", cfg: cfg, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithEventLimit(math.Inf(1), 0)}, wantErr: "driver: WithEventLimit burst must be at least 1, got 0"},
		{name: "no event limit", cfg: cfg, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithEventLimit(math.Inf(1), 1)}},
		{name: "negative timeout", cfg: &rest.Config{Host: cfg.Host, Timeout: -time.Second}, gateway: "gw", namespaces: []string{"a"}, wantErr: "kubeadapter: rest.Config.Timeout must not be negative, got -1s"},
	}
	for _, qps := range []float64{0, -1, math.NaN()} {
		tests = append(tests, struct {
			name       string
			cfg        *rest.Config
			gateway    string
			namespaces []string
			opts       []driver.Option
			wantErr    string
		}{name: fmt.Sprintf("event qps %v", qps), cfg: cfg, gateway: "gw", namespaces: []string{"a"}, opts: []driver.Option{driver.WithEventLimit(qps, 1)}, wantErr: fmt.Sprintf("driver: WithEventLimit qps must be positive, got %v", qps)})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := driver.New(tt.cfg, tt.gateway, tt.namespaces, tt.opts...)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			d.Close()
		})
	}
}

// TestNewKeepsAppliedStack: a config that already carries kubeadapter's
// stack keeps it and its options: the caller's timeout bounds each
// attempt and the caller's observer sees them. (With a stack of New's,
// the default timeout would have held the request far longer than the
// test's deadline.)
func TestNewKeepsAppliedStack(t *testing.T) {
	// A server that stopped answering: it holds each request until the
	// client gives up on it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	var attempts atomic.Int32
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithTimeout(100*time.Millisecond),
		kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: func(pooltrace.Attempt) { attempts.Add(1) }}),
	))
	d, err := driver.New(cfg, "gw", []string{"team-a"})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = d.Get(ctx, "team-a", "sb")
	require.Error(t, err)
	assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
	assert.ErrorContains(t, err, "probing agents.x-k8s.io/v1beta1: ")
	assert.ErrorContains(t, err, "request timeout of 100ms exceeded")
	assert.NoError(t, ctx.Err(), "the caller's deadline did not end it")
	assert.EqualValues(t, 3, attempts.Load(), "the list is retried, and the caller's observer sees each attempt")
}

// TestProbeEndsWithTheCaller: a caller who gives up on an API server
// that stopped answering (a Ctrl-C, a deadline) gets its context's error
// back, not the stack's timeout after it, on every client-go release the
// driver supports (before v0.37, discovery takes no context).
func TestProbeEndsWithTheCaller(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop: // before v0.37 the request outlives the caller
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	d, err := driver.New(&rest.Config{Host: srv.URL}, "gw", []string{"team-a"})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = d.Get(ctx, "team-a", "sb")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the stack's timeout, not the caller's deadline, ended it")
	assert.NotContains(t, err.Error(), "request timeout", "the stack's timeout, not the caller's deadline, ended it")
}

// TestProbeWaitersEndWithTheirOwn: while one caller's probe waits on an
// API server that stopped answering, a second caller ends with its own
// deadline, not the first caller's probe.
func TestProbeWaitersEndWithTheirOwn(t *testing.T) {
	asked := make(chan struct{}, 8)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	d, err := driver.New(&rest.Config{Host: srv.URL}, "gw", []string{"team-a"})
	require.NoError(t, err)
	t.Cleanup(d.Close)

	first, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		_, _ = d.Get(first, "team-a", "sb")
	}()
	t.Cleanup(func() { cancelFirst(); <-firstDone })
	select {
	case <-asked:
	case <-time.After(time.Minute):
		t.Fatal("the first caller's probe never reached the server")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := d.Get(ctx, "team-a", "sb")
		errc <- err
	}()
	// 300ms is the deadline; 5s keeps a loaded machine from failing the
	// test, and the log says how long it took.
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("the second caller still waits 5s after its 300ms deadline, behind the first caller's probe")
	}
	t.Logf("the second caller ended %v after it started", time.Since(start).Round(time.Millisecond))
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestProbe: on a cluster that serves v1beta1, the first operation asks
// discovery for the group version, and nothing of v1alpha1; the answer is
// kept.
func TestProbe(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	d := f.Driver(t, nil)
	ctx := context.Background()
	s, err := d.Get(ctx, "team-b", "sb-x")
	require.NoError(t, err)
	assert.True(t, s.Running)
	_, err = d.List(ctx, "team-a")
	require.NoError(t, err)
	require.NoError(t, core.Of(d).Probe(ctx))

	var sent []string
	for _, a := range f.Sandboxes.Actions() {
		sent = append(sent, a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetResource().Version)
	}
	assert.Equal(t, []string{"get resource ", "get sandboxes v1beta1", "list sandboxes v1beta1"}, sent, "probed once by discovery, then the operations")
}

// TestProbeRefuses: on a cluster that does not serve v1beta1 Sandboxes
// every operation fails before it writes anything, with an error that
// says why: one that serves only v1alpha1 runs agent-sandbox v0.4.x, which
// the driver no longer speaks, and is told how to upgrade; one that serves
// neither has no agent-sandbox. No fence is made for a create or a start.
// A failed probe is not remembered, so each operation probes again and a
// cluster upgraded under a running driver is served at the next call.
func TestProbeRefuses(t *testing.T) {
	tests := []struct {
		name     string
		serve    string
		wantErr  error
		wantKind driver.Kind
		wantMsg  []string
	}{
		{
			name: "v1alpha1 only", serve: "v1alpha1",
			wantErr: core.ErrV1alpha1Only, wantKind: driver.KindPrecondition,
			wantMsg: []string{"agents.x-k8s.io/v1alpha1", "v0.5", "api-migration-guide"},
		},
		{
			name: "not installed", serve: "",
			wantErr: core.ErrNotInstalled, wantKind: driver.KindNotFound,
			wantMsg: []string{"the API server does not serve agents.x-k8s.io/v1beta1 sandboxes; is agent-sandbox installed?"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A sandbox, but no fence, which a create or start would make
			// were the probe not first.
			f := drivertest.NewFake(t)
			f.AddSandbox(t, "team-a", "sb-0", true, "fence-a", 1)
			f.Serve(tt.serve)
			d := f.Driver(t, nil)
			ctx := context.Background()
			ops := []struct {
				op, target string
				call       func() error
			}{
				{"get", "team-a/sb-0", func() error { _, err := d.Get(ctx, "team-a", "sb-0"); return err }},
				{"list", "team-a/", func() error { _, err := d.List(ctx, "team-a"); return err }},
				{"create", "team-b/new", func() error { _, err := d.Create(ctx, "team-b", "new", drivertest.AgentPod); return err }},
				{"stop", "team-a/sb-0", func() error { _, err := d.Stop(ctx, "team-a", "sb-0"); return err }},
				{"start", "team-a/sb-0", func() error { _, err := d.Start(ctx, "team-a", "sb-0"); return err }},
				{"delete", "team-a/sb-0", func() error { return d.Delete(ctx, "team-a", "sb-0") }},
			}
			for _, o := range ops {
				err := o.call()
				require.Error(t, err, o.op)
				assert.ErrorIs(t, err, tt.wantErr, o.op)
				assert.Equal(t, tt.wantKind, driver.KindOf(err), o.op)
				for _, msg := range tt.wantMsg {
					assert.ErrorContains(t, err, msg, o.op)
				}
				assert.EqualError(t, err, fmt.Sprintf("driver: %s sandbox %s: %s: %s", o.op, o.target, tt.wantKind, tt.wantErr), o.op)
			}
			assert.Zero(t, f.Mutations(), "nothing is written on a cluster the driver cannot speak to")
			assert.Zero(t, f.Count("create", "networkpolicies"), "no fence is made")
			assert.Equal(t, 2*len(ops), f.Count("get", "resource"), "each call probes again, v1beta1 then v1alpha1")
			assert.Zero(t, f.Count("list", "sandboxes")+f.Count("get", "sandboxes"), "nothing but discovery is asked")
			for _, a := range f.Sandboxes.Actions() {
				if a.GetResource().Resource == "sandboxes" {
					assert.Equal(t, "v1beta1", a.GetResource().Version, "the driver sends v1beta1 requests only")
				}
			}
		})
	}
}

// TestProbeFailureNotRemembered: a probe that got no answer is not taken
// for one; the next call probes again.
func TestProbeFailureNotRemembered(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	var once sync.Once
	f.Sandboxes.PrependReactor("get", "resource", func(k8stesting.Action) (handled bool, _ runtime.Object, _ error) {
		once.Do(func() { handled = true })
		return handled, nil, reset
	})
	d := f.Driver(t, nil)
	_, err := d.Get(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
	assert.ErrorIs(t, err, syscall.ECONNRESET)
	assert.EqualError(t, err, "driver: get sandbox team-a/sb-0: unavailable: probing agents.x-k8s.io/v1beta1: read tcp: connection reset by peer")
	s, err := d.Get(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.True(t, s.Running)
	require.NoError(t, core.Of(d).Probe(context.Background()))
	assert.Equal(t, 2, f.Count("get", "resource"), "the failed probe and the one kept")
}

func TestStopIsANoOpWhenStopped(t *testing.T) {
	f := drivertest.StaleFixture(t, false)
	d := f.Driver(t, nil)
	s, err := d.Stop(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStopped, s.Phase)
	assert.False(t, s.Running)
	assert.Zero(t, f.Mutations(), "a patch that would change nothing is not sent")
}

// TestStop: the intent becomes stopped through one patch guarded by the
// resourceVersion read, and the sandbox is Stopping until the controller
// observes it.
func TestStop(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	m, err := meta.Accessor(f.Sandbox(t, "team-a", "sb-0"))
	require.NoError(t, err)
	rv := m.GetResourceVersion()
	d := f.Driver(t, nil)
	s, err := d.Stop(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.False(t, s.Running)
	assert.Equal(t, driver.PhaseStopping, s.Phase)
	running, _ := stored(t, f, "team-a", "sb-0")
	assert.False(t, running)
	p := patches(t, f)
	require.Len(t, p, 1)
	assert.Equal(t, rv, p[0]["metadata"].(map[string]any)["resourceVersion"], "the guard")
}

// TestWriteDeadlineIsAnError: a stop or start whose PATCH fails with an
// error that wraps context.DeadlineExceeded or context.Canceled (kubewire's
// per-attempt timeout, a caller who gave up) fails with it. client-go
// before v0.37 (the driver's floor is v0.36.3) has retry.RetryOnConflict
// return nil then, and Stop answered success with an empty sandbox; the
// agent-sandbox matrix found it on the real API server.
func TestWriteDeadlineIsAnError(t *testing.T) {
	for _, cause := range []error{context.DeadlineExceeded, context.Canceled} {
		for _, op := range []string{"stop", "start"} {
			for _, conflictFirst := range []bool{false, true} {
				name := op + "/" + cause.Error()
				if conflictFirst {
					// retry.OnError then returns the conflict instead.
					name += "/after a conflict"
				}
				t.Run(name, func(t *testing.T) {
					f := drivertest.StaleFixture(t, op == "stop")
					var patches atomic.Int32
					f.Fault("patch", "sandboxes", func(a k8stesting.Action) error {
						if conflictFirst && patches.Add(1) == 1 {
							return apierrors.NewConflict(a.GetResource().GroupResource(), "sb-0", errors.New("the object has been modified"))
						}
						return fmt.Errorf("Patch %q: request timeout: %w", a.GetResource().Resource, cause)
					})
					d := f.Driver(t, nil)
					var err error
					if op == "stop" {
						_, err = d.Stop(context.Background(), "team-a", "sb-0")
					} else {
						_, err = d.Start(context.Background(), "team-a", "sb-0")
					}
					require.Error(t, err, "the PATCH failed")
					assert.ErrorIs(t, err, cause)
					assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
				})
			}
		}
	}
}

// TestStopEndsBootstrap: a stop ends a bootstrap in progress; a stopped
// sandbox that still carries the mark gets it removed.
func TestStopEndsBootstrap(t *testing.T) {
	f := drivertest.StaleFixture(t, false)
	edit(t, f, "team-a", "sb-0", func(m metav1.Object) {
		ann := m.GetAnnotations()
		ann[drivertest.AnnBootstrap] = time.Now().UTC().Format(time.RFC3339)
		m.SetAnnotations(ann)
	})
	d := f.Driver(t, nil)
	_, err := d.Stop(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	_, ann := stored(t, f, "team-a", "sb-0")
	assert.NotContains(t, ann, drivertest.AnnBootstrap)
	assert.Equal(t, 1, f.Count("patch", "sandboxes"))
}

func TestStartRecordsCurrentFence(t *testing.T) {
	f := drivertest.StaleFixture(t, false)
	d := f.Driver(t, nil)
	s, err := d.Start(context.Background(), "team-a", "sb-1")
	require.NoError(t, err)
	assert.True(t, s.Running)
	assert.Equal(t, driver.PhaseStarting, s.Phase)
	assert.Equal(t, types.UID("fence-a"), s.FenceUID)
	assert.EqualValues(t, 2, s.FenceGeneration)
	running, ann := stored(t, f, "team-a", "sb-1")
	assert.True(t, running)
	assert.Equal(t, "fence-a", ann[drivertest.AnnFenceUID])
	assert.Equal(t, "2", ann[drivertest.AnnFenceGen])
	_, err = time.Parse(time.RFC3339, ann[drivertest.AnnBootstrap])
	assert.NoError(t, err, "a bootstrap began")
	assert.Equal(t, 1, f.Count("patch", "sandboxes"))
	assert.Equal(t, 1, f.Mutations())
}

// TestStartIsANoOpWhenAdmitted: a running sandbox admitted under the
// current fence is left alone.
func TestStartIsANoOpWhenAdmitted(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddSandbox(t, "team-a", "sb", true, "fence-a", 2)
	s, err := f.Driver(t, nil).Start(context.Background(), "team-a", "sb")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseReady, s.Phase)
	assert.Zero(t, f.Mutations())
}

// TestConflictIsDecidedAgain: another writer stops the sandbox between
// the driver's read and its patch. The patch, guarded by the
// resourceVersion read, is refused with 409; the driver reads again and,
// finding it stopped, sends nothing more.
func TestConflictIsDecidedAgain(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	gvr := sandboxes
	var once sync.Once
	f.Sandboxes.PrependReactor("get", "sandboxes", func(k8stesting.Action) (handled bool, read runtime.Object, err error) {
		once.Do(func() {
			var o runtime.Object
			if o, err = f.Sandboxes.Tracker().Get(gvr, "team-a", "sb-0"); err != nil {
				return
			}
			handled, read = true, o.DeepCopyObject()
			other := o.(*sandboxv1beta1.Sandbox)
			other.Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeSuspended
			other.Generation++
			other.ResourceVersion = "9999"
			err = f.Sandboxes.Tracker().Update(gvr, other, "team-a")
		})
		return handled, read, err
	})
	s, err := f.Driver(t, nil).Stop(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.False(t, s.Running)
	assert.Equal(t, 1, f.Count("patch", "sandboxes"), "the refused patch only")
	assert.Equal(t, 2, f.Count("get", "sandboxes"), "read again after the conflict")
	m, err := meta.Accessor(f.Sandbox(t, "team-a", "sb-0"))
	require.NoError(t, err)
	assert.Equal(t, "9999", m.GetResourceVersion(), "the other writer's change stands")
}

// TestConflictGivesUp: a sandbox that keeps changing under the patch
// fails with KindConflict after client-go's retry.DefaultRetry (five
// tries).
func TestConflictGivesUp(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	f.Sandboxes.PrependReactor("patch", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), "sb-0", errors.New("the object has been modified"))
	})
	_, err := f.Driver(t, nil).Stop(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindConflict, driver.KindOf(err))
	assert.True(t, apierrors.IsConflict(err))
	assert.Equal(t, 5, f.Count("patch", "sandboxes"))
	assert.Equal(t, 5, f.Count("get", "sandboxes"), "each try decides from a fresh read")
}

// TestNotOwned: a sandbox of another gateway or driver is neither
// reported nor touched.
func TestNotOwned(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
	}{
		{"other gateway", map[string]string{driver.LabelManagedBy: drivertest.DriverName, driver.LabelGateway: "other"}},
		{"other driver", map[string]string{driver.LabelManagedBy: "someone-else", driver.LabelGateway: "gw"}},
		{"no labels", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := drivertest.StaleFixture(t, true)
			edit(t, f, "team-a", "sb-0", func(m metav1.Object) { m.SetLabels(tt.labels) })
			d := f.Driver(t, nil)
			ctx := context.Background()
			for op, call := range map[string]func() error{
				"get":    func() error { _, err := d.Get(ctx, "team-a", "sb-0"); return err },
				"stop":   func() error { _, err := d.Stop(ctx, "team-a", "sb-0"); return err },
				"start":  func() error { _, err := d.Start(ctx, "team-a", "sb-0"); return err },
				"delete": func() error { return d.Delete(ctx, "team-a", "sb-0") },
			} {
				err := call()
				require.Error(t, err, op)
				assert.Equal(t, driver.KindPrecondition, driver.KindOf(err), op)
				assert.ErrorIs(t, err, core.ErrNotOwned, op)
				assert.ErrorContains(t, err, "sandbox is not managed by this driver for this gateway (kubewire-driver for gateway gw)", op)
			}
			l, err := d.List(ctx, "team-a")
			require.NoError(t, err)
			assert.Len(t, l, 3, "listed by its labels")
			assert.Zero(t, f.Mutations(), "a sandbox of another gateway is not touched")
		})
	}
}

func TestGetNotFound(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	d := f.Driver(t, nil)
	_, err := d.Get(context.Background(), "team-a", "missing")
	assert.Equal(t, driver.KindNotFound, driver.KindOf(err))
	assert.ErrorContains(t, err, "driver: get sandbox team-a/missing: not found")
}

// TestList: the gateway's sandboxes of the namespace, phases settled as
// Get settles them.
func TestList(t *testing.T) {
	f := drivertest.StaleFixture(t, false)
	d := f.Driver(t, nil)
	l, err := d.List(context.Background(), "team-a")
	require.NoError(t, err)
	var names []string
	for _, s := range l {
		names = append(names, s.Name)
		assert.Equal(t, driver.PhaseStopped, s.Phase, s.Name)
		assert.Equal(t, types.UID("fence-a"), s.FenceUID)
		assert.EqualValues(t, 1, s.FenceGeneration)
	}
	assert.ElementsMatch(t, []string{"sb-0", "sb-1", "sb-2", "sb-3"}, names)
	l, err = d.List(context.Background(), "team-b")
	require.NoError(t, err)
	require.Len(t, l, 1)
	assert.Equal(t, "sb-x", l[0].Name)
}

// TestNoPodRequests: v1beta1's conditions settle every phase (Suspended
// says whether a stopped sandbox's pod is gone), so no operation reads a
// pod, or writes one.
func TestNoPodRequests(t *testing.T) {
	tests := []struct {
		name    string
		running bool
	}{
		{"running", true},
		{"stopped", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := drivertest.StaleFixture(t, tt.running)
			d := f.Driver(t, nil)
			ctx := context.Background()
			_, err := d.Get(ctx, "team-a", "sb-0")
			require.NoError(t, err)
			_, err = d.List(ctx, "team-a")
			require.NoError(t, err)
			_, err = d.Stop(ctx, "team-a", "sb-1")
			require.NoError(t, err)
			_, err = d.Start(ctx, "team-a", "sb-2")
			require.NoError(t, err)
			require.NoError(t, d.Delete(ctx, "team-a", "sb-3"))
			_, err = d.Create(ctx, "team-b", "new", drivertest.AgentPod)
			require.NoError(t, err)
			for _, a := range f.Kube.Actions() {
				assert.NotEqual(t, "pods", a.GetResource().Resource, "%s pods", a.GetVerb())
			}
		})
	}
}

// TestForbidden: a 403 from the authorizer is KindForbidden, not
// internal, and keeps the API server's message, which names what RBAC
// lacks.
func TestForbidden(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	f.Sandboxes.PrependReactor("patch", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "sb-0",
			errors.New(`User "gateway" cannot patch resource "sandboxes" in API group "agents.x-k8s.io" in the namespace "team-a"`))
	})
	_, err := f.Driver(t, nil).Stop(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindForbidden, driver.KindOf(err))
	assert.Equal(t, `driver: stop sandbox team-a/sb-0: forbidden: sandboxes.agents.x-k8s.io "sb-0" is forbidden: User "gateway" cannot patch resource "sandboxes" in API group "agents.x-k8s.io" in the namespace "team-a"`, err.Error())
}

// TestErrorKinds: each answer of the API server, or its absence, has its
// kind, and the error keeps it whole.
func TestErrorKinds(t *testing.T) {
	gr := schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}
	tests := []struct {
		name string
		give error
		want driver.Kind
	}{
		{"transport", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, driver.KindUnavailable},
		{"deadline", fmt.Errorf("attempt: %w", context.DeadlineExceeded), driver.KindUnavailable},
		{"cancelled", context.Canceled, driver.KindUnavailable},
		{"not found", apierrors.NewNotFound(gr, "sb-0"), driver.KindNotFound},
		{"already exists", apierrors.NewAlreadyExists(gr, "sb-0"), driver.KindAlreadyExists},
		{"conflict", apierrors.NewConflict(gr, "sb-0", errors.New("modified")), driver.KindConflict},
		{"forbidden", apierrors.NewForbidden(gr, "sb-0", errors.New("quota")), driver.KindForbidden},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "Sandbox"}, "sb-0", nil), driver.KindInvalidArgument},
		{"bad request", apierrors.NewBadRequest("bad"), driver.KindInvalidArgument},
		{"timeout", apierrors.NewTimeoutError("slow", 1), driver.KindUnavailable},
		{"server timeout", apierrors.NewServerTimeout(gr, "get", 1), driver.KindUnavailable},
		{"unavailable", apierrors.NewServiceUnavailable("down"), driver.KindUnavailable},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), driver.KindUnavailable},
		{"internal", apierrors.NewInternalError(errors.New("boom")), driver.KindInternal},
		{"unauthorized", apierrors.NewUnauthorized("who"), driver.KindInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := drivertest.StaleFixture(t, true)
			f.Sandboxes.PrependReactor("get", "sandboxes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.give
			})
			_, err := f.Driver(t, nil).Get(context.Background(), "team-a", "sb-0")
			require.Error(t, err)
			assert.Equal(t, tt.want, driver.KindOf(err))
			assert.ErrorIs(t, err, tt.give)
			var de *driver.Error
			require.ErrorAs(t, err, &de)
			assert.Equal(t, driver.Error{Op: "get", Namespace: "team-a", Name: "sb-0", Kind: tt.want, Err: tt.give}, *de)
		})
	}
}

// TestDelete: the delete carries the uid read as a precondition, so that
// a sandbox re-created under the same name is not deleted by mistake.
func TestDelete(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	require.NoError(t, f.Driver(t, nil).Delete(context.Background(), "team-a", "sb-0"))
	var deletes []metav1.DeleteOptions
	for _, a := range f.Sandboxes.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			deletes = append(deletes, d.GetDeleteOptions())
		}
	}
	require.Len(t, deletes, 1)
	require.NotNil(t, deletes[0].Preconditions)
	assert.Equal(t, ptr(types.UID("uid-sb-0")), deletes[0].Preconditions.UID)
	_, err := f.Sandboxes.Tracker().Get(sandboxes, "team-a", "sb-0")
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
}

// TestDeleteAnswers: a delete answered 404 found the sandbox gone (a
// retried request whose first copy succeeded): success. One answered 409
// failed its uid precondition: the sandbox was re-created, and the delete
// is refused.
func TestDeleteAnswers(t *testing.T) {
	gr := schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}
	tests := []struct {
		name     string
		give     error
		wantKind driver.Kind
	}{
		{"gone", apierrors.NewNotFound(gr, "sb-0"), 0},
		{"re-created", apierrors.NewConflict(gr, "sb-0", errors.New("Precondition failed: UID in precondition: uid-sb-0, UID in object meta: uid-new")), driver.KindPrecondition},
		{"forbidden", apierrors.NewForbidden(gr, "sb-0", errors.New("no")), driver.KindForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := drivertest.StaleFixture(t, true)
			f.Sandboxes.PrependReactor("delete", "sandboxes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.give
			})
			err := f.Driver(t, nil).Delete(context.Background(), "team-a", "sb-0")
			if tt.wantKind == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.wantKind, driver.KindOf(err))
			assert.ErrorIs(t, err, tt.give)
			assert.ErrorContains(t, err, "driver: delete sandbox team-a/sb-0: ")
		})
	}
}

// TestEventsThroughKube: a driver of NewForClients records its Events
// through the kube clientset it was given.
func TestEventsThroughKube(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	d := f.Driver(t, nil)
	require.True(t, core.Of(d).Warn(core.Sandbox{Namespace: "team-a", Name: "sb-0", UID: "uid-sb-0"}, "StaleFence", "Suspend", "admitted under generation 1"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := f.Kube.EventsV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
		require.NoError(c, err)
		require.Len(c, l.Items, 1)
		assert.Equal(c, "admitted under generation 1", l.Items[0].Note)
		assert.Equal(c, corev1.ObjectReference{Kind: "Sandbox", APIVersion: "agents.x-k8s.io/v1beta1", Namespace: "team-a", Name: "sb-0", UID: "uid-sb-0"}, l.Items[0].Regarding)
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"admitted under generation 1"}, f.Events(context.Background(), t))
	d.Close()
	assert.False(t, core.Of(d).Warn(core.Sandbox{Namespace: "team-a", Name: "sb-0"}, "StaleFence", "Suspend", "late"), "dropped after Close")
}

func ptr[T any](v T) *T { return &v }
