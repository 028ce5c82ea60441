package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
)

var env *kubetest.Env

// What the driver writes on the cluster, by default: the name of each
// namespace's fence NetworkPolicy, and the annotation of a start not yet
// Ready.
const (
	fenceName                  = "sandbox-workload-fence"
	annotationBootstrapStarted = "kubewire.io/bootstrap-started"
)

func TestMain(m *testing.M) {
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, &env, crd)
}

type client struct {
	t     *testing.T
	url   string
	token string       // a bearer token, if not empty
	hc    *http.Client // nil for http.DefaultClient
}

func (c client) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	require.NoError(c.t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.httpClient().Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var out map[string]any
	if len(b) > 0 && b[0] == '{' {
		require.NoError(c.t, json.Unmarshal(b, &out), string(b))
	}
	return resp.StatusCode, out
}

// httpClient is the client of c's gateway: one that trusts its test
// certificate when it serves HTTPS (tls_test.go), else the default.
func (c client) httpClient() *http.Client {
	if c.hc != nil {
		return c.hc
	}
	return http.DefaultClient
}

// logLine waits for the log line of the error answer with id: the gateway
// logs it once the answer is written, so it may come after the answer.
func logLine(t *testing.T, logs fmt.Stringer, id string) string {
	t.Helper()
	var line string
	require.Eventually(t, func() bool {
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "id="+id) {
				line = l
			}
		}
		return line != ""
	}, 10*time.Second, 5*time.Millisecond, "no log line has id %s:\n%s", id, logs)
	return line
}

// waitPhase polls the gateway until the sandbox at path reaches phase.
func (c client) waitPhase(path, phase string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		code, body := c.do(http.MethodGet, path, "")
		return code == http.StatusOK && body["phase"] == phase
	}, 30*time.Second, 20*time.Millisecond, "%s never reached %s", path, phase)
}

// syncBuffer is a strings.Builder safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newNamespace returns the package's API server's admin config and
// clientset, and a new namespace named from prefix.
func newNamespace(t testing.TB, prefix string) (*rest.Config, kubernetes.Interface, *corev1.Namespace) {
	t.Helper()
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return cfg, cs, ns
}

// serviceAccountToken creates the ServiceAccount ns/name and returns a
// token of it from the TokenRequest API: a caller the API server
// authenticates as system:serviceaccount:ns:name.
func serviceAccountToken(t testing.TB, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// applyCaller makes a ServiceAccount name in namespaces[0], gives it the
// rules of rbac/caller.yaml (its Role in every one of namespaces, and its
// ClusterRole) and returns its token once RBAC allows it.
func applyCaller(t testing.TB, cs kubernetes.Interface, namespaces []string, name string) string {
	t.Helper()
	ctx := context.Background()
	token := serviceAccountToken(t, cs, namespaces[0], name)
	m, err := readRBAC(filepath.Join("rbac", "caller.yaml"))
	require.NoError(t, err)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespaces[0]}}
	rbac := cs.RbacV1()
	for _, ns := range namespaces {
		for _, r := range m.Roles {
			r = r.DeepCopy()
			r.Namespace = ns
			_, err := rbac.Roles(ns).Create(ctx, r, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		for _, b := range m.RoleBindings {
			b = b.DeepCopy()
			b.Namespace, b.Subjects = ns, subject
			_, err := rbac.RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	for _, r := range m.ClusterRoles {
		r = r.DeepCopy()
		r.Name += "-" + namespaces[0] + "-" + name
		_, err := rbac.ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, b := range m.ClusterRoleBindings {
		b = b.DeepCopy()
		b.Name += "-" + namespaces[0] + "-" + name
		b.RoleRef.Name += "-" + namespaces[0] + "-" + name
		b.Subjects = subject
		_, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	user := "system:serviceaccount:" + namespaces[0] + ":" + name
	specs := []authorizationv1.SubjectAccessReviewSpec{{User: user, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}
	for _, ns := range namespaces {
		specs = append(specs, authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: apiGroup, Resource: "sandboxes"}})
	}
	for _, spec := range specs {
		require.Eventually(t, func() bool {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err == nil && review.Status.Allowed
		}, 10*time.Second, 10*time.Millisecond, "RBAC never allowed %+v", spec)
	}
	return token
}
