package reconciler_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

// TestScopeAuto: Run watches the whole cluster from 10 namespaces on,
// when the API server says this client may list and watch both sandboxes
// and network policies in every namespace. Below the threshold it does
// not ask; when RBAC grants one of the four only per namespace, or when it
// cannot ask, it watches each namespace, says why (in the driver's log),
// and still syncs. The watches are read at the
// transport: a cluster-wide one has no namespace in its path. The RBAC
// cases run as users the admin impersonates, each bound to its rules.
func TestScopeAuto(t *testing.T) {
	const gw = "auto"
	cfg, namespaces := scaleRig(t, gw, clusterThreshold, 1)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	read := []string{"get", "list", "watch"}
	sandboxes := rbacv1.PolicyRule{APIGroups: []string{sandboxv1beta1.GroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: read}
	fences := rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read}

	tests := []struct {
		name        string
		namespaces  []string
		user        string
		roles       []rbacv1.PolicyRule // in each namespace
		cluster     []rbacv1.PolicyRule // in a ClusterRole
		failReviews bool
		wantCluster bool
		wantReviews int
		wantLog     string
	}{
		{name: "below the threshold", namespaces: namespaces[:clusterThreshold-1]},
		{name: "at the threshold", namespaces: namespaces, wantCluster: true, wantReviews: 4,
			wantLog: `"msg"="watching the whole cluster" "namespaces"=10`},
		{name: "namespaced RBAC", namespaces: namespaces, user: "scope-auto-roles", roles: []rbacv1.PolicyRule{sandboxes, fences}, wantReviews: 1,
			wantLog: `"msg"="watching each namespace: this client may not watch the whole cluster" "namespaces"=10 "verb"="list" "group"="agents.x-k8s.io" "resource"="sandboxes"`},
		{name: "sandboxes cluster-wide, fences per namespace", namespaces: namespaces, user: "scope-auto-partial",
			roles: []rbacv1.PolicyRule{fences}, cluster: []rbacv1.PolicyRule{sandboxes}, wantReviews: 3,
			wantLog: `"msg"="watching each namespace: this client may not watch the whole cluster" "namespaces"=10 "verb"="list" "group"="networking.k8s.io" "resource"="networkpolicies"`},
		{name: "the review fails", namespaces: namespaces, failReviews: true, wantReviews: 1,
			wantLog: `"msg"="watching each namespace: could not ask whether this client may watch the whole cluster"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rest.CopyConfig(cfg)
			if tt.user != "" {
				bind(t, kube, tt.user, tt.namespaces, tt.roles, tt.cluster)
				c.Impersonate = rest.ImpersonationConfig{UserName: tt.user}
			}
			var w scopeWatch
			w.fail = tt.failReviews
			c.Wrap(w.wrap)
			var l rig.Logs
			d, err := driver.New(c, gw, tt.namespaces, driver.WithLogger(l.Logger()))
			require.NoError(t, err)
			t.Cleanup(d.Close)
			rec := newReconciler(t, d, reconciler.WithPeriod(time.Hour))
			runReconciler(t, rec)
			require.Eventually(t, rec.Synced, rig.Settle, 10*time.Millisecond, "the caches never synced")

			cluster, perNamespace, reviews := w.result()
			if tt.wantCluster {
				assert.Equal(t, map[string]bool{"sandboxes": true, "networkpolicies": true}, cluster, "one cluster-wide watch of each")
				assert.Empty(t, perNamespace, "no watch per namespace")
			} else {
				assert.Empty(t, cluster, "no cluster-wide watch")
				assert.Len(t, perNamespace, 2*len(tt.namespaces), "a Sandbox and a fence watch per namespace")
			}
			assert.Equal(t, tt.wantReviews, reviews, "SelfSubjectAccessReviews sent")
			if tt.wantLog != "" {
				assert.Equal(t, 1, l.Count(tt.wantLog), "the log says why")
			}
		})
	}
}

// clusterThreshold is how many namespaces make Run watch the whole
// cluster, when the API server allows it (the package doc).
const clusterThreshold = 10

// bind grants user the rules roles in each of namespaces, and cluster
// in a ClusterRole, if any.
func bind(t *testing.T, kube kubernetes.Interface, user string, namespaces []string, roles, cluster []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	meta := metav1.ObjectMeta{Name: user}
	for _, ns := range namespaces {
		meta := metav1.ObjectMeta{Name: user, Namespace: ns}
		_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: roles}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	if len(cluster) == 0 {
		return
	}
	_, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: cluster}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{})
	})
}

// scopeWatch records the informers' watches, cluster-wide or per
// namespace, and counts the SelfSubjectAccessReviews; fail answers
// those with 500 instead of the server.
type scopeWatch struct {
	fail bool

	mu           sync.Mutex
	cluster      map[string]bool // by resource
	perNamespace map[string]bool // by path
	reviews      int
}

func (w *scopeWatch) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/selfsubjectaccessreviews") {
			w.mu.Lock()
			w.reviews++
			w.mu.Unlock()
			if w.fail {
				return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","code":500}`)), Request: req}, nil
			}
		}
		w.watch(req)
		return rt.RoundTrip(req)
	})
}

// watch records req if it is an informer's watch.
func (w *scopeWatch) watch(req *http.Request) {
	p := req.URL.Path
	resource := p[strings.LastIndex(p, "/")+1:]
	if req.Method != http.MethodGet || !watching(req.URL.Query()) || (resource != "sandboxes" && resource != "networkpolicies") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(p, "/namespaces/") {
		if w.perNamespace == nil {
			w.perNamespace = map[string]bool{}
		}
		w.perNamespace[p] = true
		return
	}
	if w.cluster == nil {
		w.cluster = map[string]bool{}
	}
	w.cluster[resource] = true
}

func (w *scopeWatch) result() (cluster, perNamespace map[string]bool, reviews int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cluster, w.perNamespace, w.reviews
}
