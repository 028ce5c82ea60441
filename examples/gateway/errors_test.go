package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/kubeadapter"
)

// TestGatewayForbidden: a create the API server's admission refuses (an
// exceeded quota, a namespace being deleted) is answered 403 with the API
// server's reason, which the caller can act on. RBAC's refusal of the
// gateway's own user is the gateway's problem: 500, and the user's name
// only in the log.
func TestGatewayForbidden(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	newNS := func() string {
		ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-403-"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return ns.Name
	}

	// A quota of no sandboxes. No quota controller runs, so the test sets
	// its status (until it has one, the quota refuses everything it
	// limits as "status unknown"); configmaps tell when admission sees it.
	quotaNS := newNS()
	noSandboxes(t, cs, quotaNS)
	waitRefused(t, cs, quotaNS, "exceeded quota: no-sandboxes")

	// A namespace being deleted: no namespace controller runs to empty it,
	// so it stays Terminating.
	terminatingNS := newNS()
	require.NoError(t, cs.CoreV1().Namespaces().Delete(ctx, terminatingNS, metav1.DeleteOptions{}))
	waitRefused(t, cs, terminatingNS, "because it is being terminated")

	// A user RBAC grants nothing in the namespace.
	const user = "gw-denied-user"
	denied, err := env.AddUser(user)
	require.NoError(t, err)

	tests := []struct {
		name      string
		cfg       *rest.Config
		ns        string
		wantCode  int
		wantError string // in the answer's error
	}{
		{name: "quota", cfg: cfg, ns: quotaNS, wantCode: http.StatusForbidden,
			wantError: `forbidden: sandboxes.agents.x-k8s.io "alpha" is forbidden: exceeded quota: no-sandboxes, requested: count/sandboxes.agents.x-k8s.io=1`},
		{name: "namespace terminating", cfg: cfg, ns: terminatingNS, wantCode: http.StatusForbidden,
			wantError: "because it is being terminated"},
		{name: "RBAC denies the gateway", cfg: denied, ns: newNS(), wantCode: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			d, err := driver.New(tt.cfg, "gw-403", []string{tt.ns})
			require.NoError(t, err)
			defer d.Close()
			srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), logr.FromSlogHandler(slog.NewTextHandler(&logs, nil)), nil, nil))
			defer srv.Close()

			resp, err := http.Post(srv.URL+"/v1/namespaces/"+tt.ns+"/sandboxes", "application/json", strings.NewReader(`{"name":"alpha","podTemplate":`+template+`}`))
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			var got struct{ Kind, Error, ID string }
			require.NoError(t, json.Unmarshal(b, &got), string(b))
			assert.Equal(t, tt.wantCode, resp.StatusCode, string(b))
			assert.Equal(t, "forbidden", got.Kind)
			assert.True(t, strings.HasPrefix(got.Error, "driver: create sandbox "+tt.ns+"/alpha: forbidden"), got.Error)
			assert.Contains(t, got.Error, tt.wantError)
			assert.NotContains(t, string(b), user)
			line := logLine(t, &logs, got.ID)
			if tt.cfg == denied {
				assert.Equal(t, "driver: create sandbox "+tt.ns+"/alpha: forbidden", got.Error, "RBAC's message is the gateway's, not the caller's")
				assert.Contains(t, line, `User \"`+user+`\" cannot`)
			}
		})
	}
}

// noSandboxes gives ns a ResourceQuota "no-sandboxes" of no sandboxes and
// no configmaps, with its status set.
func noSandboxes(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	zero := resource.MustParse("0")
	limits := corev1.ResourceList{"count/sandboxes.agents.x-k8s.io": zero, "count/configmaps": zero}
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-sandboxes"}, Spec: corev1.ResourceQuotaSpec{Hard: limits}}, metav1.CreateOptions{})
	require.NoError(t, err)
	q.Status = corev1.ResourceQuotaStatus{Hard: limits, Used: corev1.ResourceList{"count/sandboxes.agents.x-k8s.io": zero, "count/configmaps": zero}}
	_, err = cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// waitRefused waits until admission refuses a configmap in ns with an
// error that contains want.
func waitRefused(t *testing.T, cs kubernetes.Interface, ns, want string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		if assert.Error(c, err) {
			assert.Contains(c, err.Error(), want)
		}
	}, 30*time.Second, 20*time.Millisecond)
}

// TestRefusedByAdmission: the API server's 403s, told apart by their
// messages as k8s.io/apiserver v0.37.2 writes them.
func TestRefusedByAdmission(t *testing.T) {
	sandboxes := schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"quota", apierrors.NewForbidden(sandboxes, "q", errors.New("exceeded quota: q, requested: count/sandboxes.agents.x-k8s.io=1, used: count/sandboxes.agents.x-k8s.io=0, limited: count/sandboxes.agents.x-k8s.io=0")), true},
		{"namespace terminating", apierrors.NewForbidden(sandboxes, "q", errors.New("unable to create new content in namespace team-a because it is being terminated")), true},
		{"admission webhook", apierrors.NewForbidden(sandboxes, "q", errors.New(`admission webhook "policy.example.com" denied the request: image not allowed`)), true},
		{"RBAC", apierrors.NewForbidden(sandboxes, "q", errors.New(`User "system:serviceaccount:gateway-system:gateway" cannot create resource "sandboxes" in API group "agents.x-k8s.io" in the namespace "team-a"`)), false},
		{"RBAC, a user name with a quote", apierrors.NewForbidden(sandboxes, "", errors.New(`User "a\"b" cannot list resource "sandboxes" in API group "agents.x-k8s.io" at the cluster scope`)), false},
		{"RBAC, a path", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(`User "gw" cannot get path "/apis"`)), false},
		{"RBAC, a webhook authorizer's reason", apierrors.NewForbidden(sandboxes, "q", errors.New(`User "gw" cannot delete resource "sandboxes" in API group "agents.x-k8s.io" in the namespace "team-a": outside business hours`)), false},
		{"no status", errors.New("forbidden"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := &driver.Error{Op: "create", Namespace: "team-a", Name: "q", Kind: driver.KindForbidden, Err: tt.give}
			assert.Equal(t, tt.want, refusedByAdmission(err))
		})
	}
}

// TestGatewayErrorsHideAddresses: when the API server cannot be reached
// or answers with an error, the caller gets the kind, a message without
// the API server's URL or any address, and an id; the gateway's log line
// with that id has the whole chain, down to the connection.
func TestGatewayErrorsHideAddresses(t *testing.T) {
	// An API server behind a proxy that cannot reach it answers 500 with
	// the proxy's error, internal address and all.
	erroring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "proxy: dial tcp 10.96.0.12:6443: i/o timeout", http.StatusInternalServerError)
	}))
	defer erroring.Close()
	tests := []struct {
		name      string
		give      string
		wantCode  int
		wantKind  string
		wantChain []string
	}{
		{
			name: "unreachable", give: "http://127.0.0.1:1", wantCode: http.StatusServiceUnavailable, wantKind: "unavailable",
			wantChain: []string{"driver: stop sandbox team-a/alpha: unavailable", "retry: GET failed after 3 attempts", "before a connection was established", "http://127.0.0.1:1/apis/agents.x-k8s.io/v1beta1", "dial tcp 127.0.0.1:1", "connection refused"},
		},
		{
			name: "erroring", give: erroring.URL, wantCode: http.StatusInternalServerError, wantKind: "internal",
			wantChain: []string{"driver: stop sandbox team-a/alpha: internal", "probing agents.x-k8s.io/v1beta1", "proxy: dial tcp 10.96.0.12:6443: i/o timeout"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			log := logr.FromSlogHandler(slog.NewTextHandler(&logs, nil))
			cfg := &rest.Config{Host: tt.give}
			require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithTimeout(time.Second)))
			d, err := driver.New(cfg, "gw", []string{"team-a"})
			require.NoError(t, err)
			defer d.Close()
			srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), log, nil, nil))
			defer srv.Close()

			resp, err := http.Post(srv.URL+"/v1/namespaces/team-a/sandboxes/alpha/stop", "", nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			body := string(b)
			assert.Equal(t, tt.wantCode, resp.StatusCode, body)
			for _, leak := range []string{"127.0.0.1", "10.96.0.12", "http://", "https://", ":1/", ":6443", strings.TrimPrefix(tt.give, "http://")} {
				assert.NotContains(t, body, leak)
			}
			assert.NotRegexp(t, `\d+\.\d+\.\d+\.\d+|:\d`, body, "an address")

			var got struct{ Kind, Error, ID string }
			require.NoError(t, json.Unmarshal(b, &got), body)
			assert.Equal(t, tt.wantKind, got.Kind)
			assert.Equal(t, tt.wantChain[0], got.Error)
			require.NotEmpty(t, got.ID, body)
			assert.Equal(t, got.ID, resp.Header.Get("X-Request-Id"))

			line := logLine(t, &logs, got.ID)
			for _, want := range tt.wantChain {
				assert.Contains(t, line, want)
			}
		})
	}
}
