package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
)

// The manifests in rbac/ are written for a gateway gw serving team-a and
// team-b (the lease in team-a, the first), run as this ServiceAccount; the
// test gives their rules to its own user and namespaces, a Role that both
// have to each namespace it serves.
var (
	rbacNamespaces = []string{"team-a", "team-b"}
	rbacSubject    = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "gateway", Namespace: "gateway-system"}
)

const rbacGateway = "gw"

// rbacAuditPolicy logs every request once, when it is answered (a watch:
// also when it starts), with the authorizer's decision and reason.
const rbacAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// TestRBAC runs two replicas of the gateway as a user that has only the
// rules of a manifest in rbac/, in each of the reconciler's scopes:
// namespaced.yaml with two namespaces, which the reconciler watches one by
// one, and cluster.yaml with ten, the fewest it watches cluster-wide. It
// drives every operation of the API (create, get, list, stop, start,
// delete) in each namespace, with agent-sandbox's controller and a fake
// kubelet, and two fence changes that each make the reconciler suspend the
// sandbox and record a warning Event. Then it reads the API server's audit
// log: it fails if any request of that user was refused (a rule is
// missing) or if a rule of the manifest allowed none of them (a rule is
// unused). Each request is credited to the binding the RBAC authorizer
// names as allowing it.
func TestRBAC(t *testing.T) {
	env.Config(t) // skips without an API server, as the package's tests do
	crd, err := sandboxtest.SandboxCRD()
	require.NoError(t, err)
	current := startAudited(t, crd)
	for _, tt := range []struct {
		manifest   string
		namespaces int
	}{
		{"namespaced", 2},
		{"cluster", 10},
	} {
		t.Run(tt.manifest, func(t *testing.T) {
			testRBAC(t, current, tt.manifest, tt.namespaces, []string{tt.manifest + ".yaml"}, func(t *testing.T, admin *rest.Config, ns string) {
				sandboxtest.RunController(t, admin, ns)
			})
		})
	}
}

// audited is an API server with an audit log, until the test ends.
type audited struct {
	env *kubetest.Env
	log string
}

func startAudited(t *testing.T, crd string) *audited {
	t.Helper()
	dir := t.TempDir()
	a := &audited{log: filepath.Join(dir, "audit.log")}
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(rbacAuditPolicy), 0o600))
	a.env = kubetest.StartWith(kubetest.Options{CRDPaths: []string{crd}, APIServerArgs: map[string]string{
		"audit-policy-file": policy,
		"audit-log-path":    a.log,
		// Informers list, then watch, on an API server that does not
		// stream the initial list in a watch (WatchList is off by default
		// on 1.33, for one); with it they only watch, which the same
		// rules allow. The test sees the list.
		"feature-gates": "WatchList=false",
	}})
	t.Cleanup(func() { assert.NoError(t, a.env.Stop()) })
	return a
}

// testRBAC runs the flow against srv as a user named for manifest with
// the rules of files, on n namespaces whose sandboxes runController and a
// fake kubelet run, and checks the audit log once the gateways have
// stopped, also when the flow failed.
func testRBAC(t *testing.T, srv *audited, manifest string, n int, files []string, runController func(t *testing.T, admin *rest.Config, ns string)) {
	admin := srv.env.Config(t)
	cs, err := kubernetes.NewForConfig(admin)
	require.NoError(t, err)
	ctx := context.Background()
	var namespaces []string
	for range n {
		ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-" + manifest + "-"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		namespaces = append(namespaces, ns.Name)
	}
	// The gateway sorts its namespaces; the lease is in the first.
	sort.Strings(namespaces)
	user := "gateway-" + manifest
	var m rbacManifest
	for _, f := range files {
		part, err := readRBAC(filepath.Join("rbac", f))
		require.NoError(t, err)
		m = m.add(part)
	}
	m, err = m.bind(user, namespaces)
	require.NoError(t, err)
	m.apply(t, cs)

	userCfg, err := srv.env.AddUser(user)
	require.NoError(t, err)
	kubeconfig := kubetest.WriteKubeconfig(t, userCfg)
	// The flow's caller, with the rights rbac/caller.yaml gives, in
	// every namespace.
	token := applyCaller(t, cs, namespaces, "caller-"+manifest)
	for _, ns := range namespaces {
		runController(t, admin, ns)
		kubetest.RunKubelet(t, admin, ns)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	outs := make([]*syncBuffer, 2)
	for i := range outs {
		outs[i] = &syncBuffer{}
		wg.Go(func() {
			args := []string{"-kubeconfig", kubeconfig, "-namespace", strings.Join(namespaces, ","), "-gateway", rbacGateway,
				"-replicas", "2", "-listen", "127.0.0.1:0"}
			assert.Equal(t, 0, run(runCtx, args, outs[i]), "replica %d:\n%s", i, outs[i])
		})
	}
	// Registered after the controllers and kubelets, it runs before they
	// stop: on a failed flow too, the audit log says what was refused.
	t.Cleanup(func() {
		stop()
		wg.Wait()
		events := readAuditUntilMarker(t, cs, srv.log, namespaces[0], user)
		checkRBAC(t, m, events, user)
		leaders := 0
		for _, o := range outs {
			leaders += strings.Count(o.String(), "msg=leading")
		}
		assert.Equal(t, 1, leaders, "one replica leads:\n%s\n%s", outs[0], outs[1])
	})
	var urls []string
	for i, out := range outs {
		var addr string
		require.Eventually(t, func() bool {
			if m := regexp.MustCompile(`msg=serving addr=(\S+)`).FindStringSubmatch(out.String()); m != nil {
				addr = m[1]
			}
			return addr != ""
		}, 30*time.Second, 10*time.Millisecond, "replica %d never served:\n%s", i, out)
		urls = append(urls, "http://"+addr)
	}
	rbacFlow(t, cs, urls, namespaces, token)
}

// rbacFlow drives every operation through the gateways' API in each
// namespace (the first namespace through the first replica, the second
// through the second, and so on in turn), with two fence changes, each of
// which the leader's reconciler answers by suspending the sandbox and
// recording a warning Event. The second warning is about the same
// sandbox; the recorder makes it a new Event rather than a repeat of the
// first (its key holds the sandbox's resourceVersion, which the suspension
// changed), so no Event is ever patched.
func rbacFlow(t *testing.T, cs kubernetes.Interface, urls, namespaces []string, token string) {
	ctx := context.Background()
	clients := make([]client, len(namespaces))
	bases := make([]string, len(namespaces))
	for i, ns := range namespaces {
		clients[i] = client{t: t, url: urls[i%len(urls)], token: token}
		bases[i] = "/v1/namespaces/" + ns + "/sandboxes"
	}
	each := func(f func(c client, ns, base string)) {
		for i, ns := range namespaces {
			f(clients[i], ns, bases[i])
		}
	}
	each(func(c client, _, base string) {
		code, body := c.do(http.MethodPost, base, `{"name":"s","podTemplate":{"spec":{"containers":[{"name":"agent","image":"busybox"}]}}}`)
		require.Equal(t, http.StatusCreated, code, body)
	})
	each(func(c client, _, base string) { c.waitPhase(base+"/s", "Ready") })
	each(func(c client, _, base string) {
		req, err := http.NewRequest(http.MethodGet, c.url+base, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var list []sandbox
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		require.Len(t, list, 1)
		assert.Equal(t, "s", list[0].Name)
	})
	each(func(c client, _, base string) {
		code, body := c.do(http.MethodPost, base+"/s/stop", "")
		require.Equal(t, http.StatusOK, code, body)
	})
	each(func(c client, _, base string) { c.waitPhase(base+"/s", "Stopped") })
	for round := 1; round <= 2; round++ {
		each(func(c client, _, base string) {
			code, body := c.do(http.MethodPost, base+"/s/start", "")
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, true, body["running"], body)
		})
		each(func(_ client, ns, _ string) {
			np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, fenceName, metav1.GetOptions{})
			require.NoError(t, err)
			if round == 1 {
				np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
			} else {
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			}
			_, err = cs.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{})
			require.NoError(t, err)
		})
		each(func(c client, ns, base string) {
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				code, body := c.do(http.MethodGet, base+"/s", "")
				require.Equal(ct, http.StatusOK, code, body)
				assert.Equal(ct, false, body["running"], "suspended")
				list, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
				require.NoError(ct, err)
				var warnings int
				for _, ev := range list.Items {
					if ev.Reason == "StaleFence" && ev.Regarding.Name == "s" {
						warnings++
						assert.Nil(ct, ev.Series, "a new Event, not a repeat")
					}
				}
				assert.Equal(ct, round, warnings, "StaleFence Events")
			}, 30*time.Second, 20*time.Millisecond, "round %d in %s", round, ns)
		})
	}
	each(func(c client, _, base string) {
		code, body := c.do(http.MethodDelete, base+"/s", "")
		require.Equal(t, http.StatusNoContent, code, body)
		code, body = c.do(http.MethodGet, base+"/s", "")
		require.Equal(t, http.StatusNotFound, code, body)
	})
}

// rbacMarker is the ConfigMap whose creation ends the audit log a test
// reads: the gateways have stopped, and every request they made was
// answered, before it is created.
const rbacMarker = "rbac-audit-marker"

// readAuditUntilMarker creates the marker in ns and reads the audit log
// until it holds the marker's creation; it returns user's events, one per
// request: the last stage logged of it.
func readAuditUntilMarker(t *testing.T, cs kubernetes.Interface, path, ns, user string) []auditv1.Event {
	t.Helper()
	_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rbacMarker}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var out []auditv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, marked, err := readAudit(path, ns, user)
		require.NoError(c, err)
		out = events
		assert.True(c, marked, "the marker's creation is logged")
	}, 10*time.Second, 20*time.Millisecond)
	return out
}

func readAudit(path, markerNS, user string) (_ []auditv1.Event, marked bool, _ error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	byID := map[string]int{}
	var out []auditv1.Event
	dec := json.NewDecoder(f)
	for {
		var ev auditv1.Event
		err := dec.Decode(&ev)
		if err == io.EOF {
			return out, marked, nil
		}
		if err != nil {
			// A line being written: read again.
			return out, false, nil
		}
		if ref := ev.ObjectRef; ref != nil && ev.Verb == "create" && ref.Resource == "configmaps" && ref.Namespace == markerNS &&
			ref.Name == rbacMarker && ev.Stage == auditv1.StageResponseComplete {
			marked = true
		}
		if ev.User.Username != user {
			continue
		}
		if i, ok := byID[string(ev.AuditID)]; ok {
			out[i] = ev
			continue
		}
		byID[string(ev.AuditID)] = len(out)
		out = append(out, ev)
	}
}

// grant is one verb a binding gives on a resource: what a request is
// credited to.
type grant struct {
	Binding         string // as the RBAC authorizer names it: RoleBinding "name/namespace", ClusterRoleBinding "name"
	Group, Resource string
	Verb            string
}

func (g grant) String() string {
	if g.Group == "" {
		return fmt.Sprintf("%s: %s %s", g.Binding, g.Verb, g.Resource)
	}
	return fmt.Sprintf("%s: %s %s/%s", g.Binding, g.Verb, g.Group, g.Resource)
}

// allowedBy is the RBAC authorizer's reason for allowing a request
// (kubernetes plugin/pkg/auth/authorizer/rbac: "RBAC: allowed by " and the
// binding's description).
var allowedBy = regexp.MustCompile(`^RBAC: allowed by ((?:RoleBinding|ClusterRoleBinding) "[^"]+") of `)

// checkRBAC fails for each request of user the API server refused and for
// each grant of m no request of user was allowed by.
func checkRBAC(t *testing.T, m rbacManifest, events []auditv1.Event, user string) {
	t.Helper()
	grants := m.grants()
	used := map[grant]int{}
	refused, elsewhere := map[string]int{}, map[string]int{}
	nonResource, reviews := 0, 0
	for _, ev := range events {
		ref := ev.ObjectRef
		what := ev.Verb + " " + ev.RequestURI
		if ref != nil {
			what = fmt.Sprintf("%s %s/%s namespace %q name %q", ev.Verb, ref.APIGroup, ref.Resource, ref.Namespace, ref.Name)
		}
		if reason := ev.Annotations["authorization.k8s.io/reason"]; reason != "" {
			what += " (" + reason + ")"
		}
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusForbidden || ev.Annotations["authorization.k8s.io/decision"] == "forbid" {
			refused[what]++
			continue
		}
		if ref == nil {
			nonResource++
			continue
		}
		if ref.APIGroup == "authorization.k8s.io" && ref.Resource == "selfsubjectaccessreviews" {
			// From 10 namespaces on, the reconciler asks whether it may
			// watch the whole cluster. Every authenticated user may ask
			// (the default ClusterRole system:basic-user), as every
			// one may read discovery.
			reviews++
			continue
		}
		resource := ref.Resource
		if ref.Subresource != "" {
			resource += "/" + ref.Subresource
		}
		b := allowedBy.FindStringSubmatch(ev.Annotations["authorization.k8s.io/reason"])
		g := grant{Group: ref.APIGroup, Resource: resource, Verb: ev.Verb}
		if b != nil {
			g.Binding = b[1]
		}
		if !grants[g] {
			elsewhere[what]++
			continue
		}
		used[g]++
	}
	var lines []string
	for g, n := range used {
		lines = append(lines, fmt.Sprintf("%4d  %s", n, g))
	}
	sort.Strings(lines)
	t.Logf("requests of %s: %d to resources, %d SelfSubjectAccessReviews, %d to discovery and other paths; by grant:\n%s",
		user, len(events)-nonResource-reviews, reviews, nonResource, strings.Join(lines, "\n"))
	assert.Empty(t, refused, "requests refused: a rule is missing from the manifest")
	var unused []string
	for g := range grants {
		if used[g] == 0 {
			unused = append(unused, g.String())
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "grants no request used: remove them from the manifest, or drive what needs them")
	// The discovery requests and the like are allowed by the roles every
	// authenticated user has; a resource request should not be.
	assert.Empty(t, elsewhere, "resource requests allowed by a binding the manifest does not have")
}

// rbacManifest is the RBAC objects of a manifest.
type rbacManifest struct {
	Roles               []*rbacv1.Role
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoles        []*rbacv1.ClusterRole
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// add returns m with the objects of o.
func (m rbacManifest) add(o rbacManifest) rbacManifest {
	return rbacManifest{
		Roles:               append(m.Roles, o.Roles...),
		RoleBindings:        append(m.RoleBindings, o.RoleBindings...),
		ClusterRoles:        append(m.ClusterRoles, o.ClusterRoles...),
		ClusterRoleBindings: append(m.ClusterRoleBindings, o.ClusterRoleBindings...),
	}
}

// readRBAC reads the RBAC objects of a multi-document YAML file; any other
// kind is an error.
func readRBAC(path string) (rbacManifest, error) {
	var m rbacManifest
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, fmt.Errorf("%s: %w", path, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return m, fmt.Errorf("%s: %w", path, err)
		}
		switch o := obj.(type) {
		case *rbacv1.Role:
			m.Roles = append(m.Roles, o)
		case *rbacv1.RoleBinding:
			m.RoleBindings = append(m.RoleBindings, o)
		case *rbacv1.ClusterRole:
			m.ClusterRoles = append(m.ClusterRoles, o)
		case *rbacv1.ClusterRoleBinding:
			m.ClusterRoleBindings = append(m.ClusterRoleBindings, o)
		default:
			return m, fmt.Errorf("%s: unexpected %T", path, obj)
		}
	}
}

// bind returns m for user and namespaces, the first of which holds the
// lease: a Role or RoleBinding that m gives each of [rbacNamespaces] is
// each served namespace's, and is given every one of namespaces; any other
// goes to the namespace at the index of its own in [rbacNamespaces]. Each
// binding's one subject, [rbacSubject], becomes user.
func (m rbacManifest) bind(user string, namespaces []string) (rbacManifest, error) {
	var errs []error
	ns := func(what, from string) string {
		i := slices.Index(rbacNamespaces, from)
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s is in namespace %q, not one of %v", what, from, rbacNamespaces))
			return from
		}
		return namespaces[i]
	}
	subjects := func(what string, s []rbacv1.Subject) []rbacv1.Subject {
		if len(s) != 1 || s[0] != rbacSubject {
			errs = append(errs, fmt.Errorf("%s binds %v, want only %v", what, s, rbacSubject))
		}
		return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	}
	// where returns the namespaces an object of m goes to: none for all
	// but one copy of an object every namespace has.
	where := func(what, name, from string, count map[string]int) []string {
		switch {
		case count[name] < len(rbacNamespaces):
			return []string{ns(what, from)}
		case from == rbacNamespaces[0]:
			return namespaces
		}
		return nil
	}
	roles, bindings := map[string]int{}, map[string]int{}
	for _, r := range m.Roles {
		roles[r.Name]++
	}
	for _, b := range m.RoleBindings {
		bindings[b.Name]++
	}
	var out rbacManifest
	for _, r := range m.Roles {
		for _, n := range where("Role "+r.Name, r.Name, r.Namespace, roles) {
			r := r.DeepCopy()
			r.Namespace = n
			out.Roles = append(out.Roles, r)
		}
	}
	for _, b := range m.RoleBindings {
		for _, n := range where("RoleBinding "+b.Name, b.Name, b.Namespace, bindings) {
			b := b.DeepCopy()
			b.Namespace = n
			b.Subjects = subjects("RoleBinding "+b.Name, b.Subjects)
			out.RoleBindings = append(out.RoleBindings, b)
		}
	}
	// Cluster-scoped objects are named for user too: the manifests share
	// an API server, and both have kubewire-gateway-auth.
	for _, r := range m.ClusterRoles {
		r = r.DeepCopy()
		r.Name += "-" + user
		out.ClusterRoles = append(out.ClusterRoles, r)
	}
	for _, b := range m.ClusterRoleBindings {
		b = b.DeepCopy()
		b.Name += "-" + user
		b.RoleRef.Name += "-" + user
		b.Subjects = subjects("ClusterRoleBinding "+b.Name, b.Subjects)
		out.ClusterRoleBindings = append(out.ClusterRoleBindings, b)
	}
	return out, errors.Join(errs...)
}

// boundRule is a rule of a role as a binding gives it.
type boundRule struct {
	binding   string // the authorizer's name for it
	user      string // its subject
	namespace string // where it applies; "" for every namespace and the cluster
	rule      rbacv1.PolicyRule
}

// rules returns the rules each binding of m gives, with the roles it
// refers to resolved within m.
func (m rbacManifest) rules() ([]boundRule, error) {
	var out []boundRule
	var errs []error
	clusterRole := func(name string) []rbacv1.PolicyRule {
		for _, r := range m.ClusterRoles {
			if r.Name == name {
				return r.Rules
			}
		}
		errs = append(errs, fmt.Errorf("no ClusterRole %s", name))
		return nil
	}
	for _, b := range m.RoleBindings {
		var rules []rbacv1.PolicyRule
		if b.RoleRef.Kind == "ClusterRole" {
			rules = clusterRole(b.RoleRef.Name)
		} else if i := slices.IndexFunc(m.Roles, func(r *rbacv1.Role) bool { return r.Namespace == b.Namespace && r.Name == b.RoleRef.Name }); i >= 0 {
			rules = m.Roles[i].Rules
		} else {
			errs = append(errs, fmt.Errorf("RoleBinding %s/%s: no Role %s", b.Namespace, b.Name, b.RoleRef.Name))
		}
		for _, r := range rules {
			out = append(out, boundRule{fmt.Sprintf("RoleBinding %q", b.Name+"/"+b.Namespace), subject(b.Subjects), b.Namespace, r})
		}
	}
	for _, b := range m.ClusterRoleBindings {
		for _, r := range clusterRole(b.RoleRef.Name) {
			out = append(out, boundRule{fmt.Sprintf("ClusterRoleBinding %q", b.Name), subject(b.Subjects), "", r})
		}
	}
	for _, r := range m.Roles {
		if !slices.ContainsFunc(m.RoleBindings, func(b *rbacv1.RoleBinding) bool {
			return b.Namespace == r.Namespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == r.Name
		}) {
			errs = append(errs, fmt.Errorf("Role %s/%s: no RoleBinding", r.Namespace, r.Name))
		}
	}
	for _, r := range m.ClusterRoles {
		if !slices.ContainsFunc(m.ClusterRoleBindings, func(b *rbacv1.ClusterRoleBinding) bool { return b.RoleRef.Name == r.Name }) &&
			!slices.ContainsFunc(m.RoleBindings, func(b *rbacv1.RoleBinding) bool { return b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == r.Name }) {
			errs = append(errs, fmt.Errorf("ClusterRole %s: no binding", r.Name))
		}
	}
	return out, errors.Join(errs...)
}

// subject is the name of a binding's first subject.
func subject(s []rbacv1.Subject) string {
	if len(s) == 0 {
		return ""
	}
	return s[0].Name
}

// grants returns every verb on every resource that a binding of m gives.
func (m rbacManifest) grants() map[grant]bool {
	rules, _ := m.rules() // apply has checked them
	out := map[grant]bool{}
	for _, br := range rules {
		for _, g := range br.rule.APIGroups {
			for _, res := range br.rule.Resources {
				for _, v := range br.rule.Verbs {
					out[grant{Binding: br.binding, Group: g, Resource: res, Verb: v}] = true
				}
			}
		}
	}
	return out
}

// apply creates m's objects and waits until the authorizer allows each of
// its grants (its RBAC cache follows the objects through a watch).
func (m rbacManifest) apply(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	rules, err := m.rules()
	require.NoError(t, err)
	rbac := cs.RbacV1()
	for _, r := range m.ClusterRoles {
		_, err := rbac.ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, r := range m.Roles {
		_, err := rbac.Roles(r.Namespace).Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, b := range m.ClusterRoleBindings {
		_, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, b := range m.RoleBindings {
		_, err := rbac.RoleBindings(b.Namespace).Create(ctx, b, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, br := range rules {
		for _, attrs := range br.attributes() {
			require.Eventually(t, func() bool {
				review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: br.user, ResourceAttributes: &attrs,
				}}, metav1.CreateOptions{})
				return err == nil && review.Status.Allowed
			}, 10*time.Second, 10*time.Millisecond, "%s never allowed %+v", br.binding, attrs)
		}
	}
}

// attributes returns a request for each verb on each resource of br.
func (br boundRule) attributes() []authorizationv1.ResourceAttributes {
	var name string
	if len(br.rule.ResourceNames) > 0 {
		name = br.rule.ResourceNames[0]
	}
	var out []authorizationv1.ResourceAttributes
	for _, g := range br.rule.APIGroups {
		for _, res := range br.rule.Resources {
			for _, v := range br.rule.Verbs {
				out = append(out, authorizationv1.ResourceAttributes{Namespace: br.namespace, Group: g, Resource: res, Verb: v, Name: name})
			}
		}
	}
	return out
}

// TestRBACReadme checks docs/gateway.md's table of the gateway's RBAC against
// the manifests in rbac/.
func TestRBACReadme(t *testing.T) {
	want, err := rbacTable()
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), want), "docs/gateway.md lacks the table of rbac/*.yaml, which is:\n%s", want)
}

// rbacTable renders the rules of the manifests in rbac/ as a Markdown
// table, a row per rule: Roles of one name, which must have the same
// rules in every namespace, make one row each.
func rbacTable() (string, error) {
	var b strings.Builder
	b.WriteString("| manifest | granted by | API group | resources | verbs |\n|---|---|---|---|---|\n")
	row := func(manifest, by string, r rbacv1.PolicyRule) {
		groups := make([]string, len(r.APIGroups))
		for i, g := range r.APIGroups {
			groups[i] = "`" + g + "`"
			if g == "" {
				groups[i] = "core"
			}
		}
		res := "`" + strings.Join(r.Resources, "`, `") + "`"
		if len(r.ResourceNames) > 0 {
			res += " named `" + strings.Join(r.ResourceNames, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", manifest, by, strings.Join(groups, ", "), res, strings.Join(r.Verbs, ", "))
	}
	for _, f := range []struct{ file, manifest string }{
		{"namespaced.yaml", "`namespaced.yaml`"},
		{"cluster.yaml", "`cluster.yaml`"},
	} {
		m, err := readRBAC(filepath.Join("rbac", f.file))
		if err != nil {
			return "", err
		}
		if _, err := m.rules(); err != nil {
			return "", fmt.Errorf("%s: %w", f.file, err)
		}
		for _, r := range m.ClusterRoles {
			for _, rule := range r.Rules {
				row(f.manifest, "ClusterRole `"+r.Name+"`", rule)
			}
		}
		var names []string
		where := map[string][]string{}
		for _, r := range m.Roles {
			if !slices.Contains(names, r.Name) {
				names = append(names, r.Name)
			}
			where[r.Name] = append(where[r.Name], r.Namespace)
		}
		for _, name := range names {
			var rules []rbacv1.PolicyRule
			for _, r := range m.Roles {
				if r.Name != name {
					continue
				}
				if rules == nil {
					rules = r.Rules
				} else if !equality.Semantic.DeepEqual(rules, r.Rules) {
					return "", fmt.Errorf("%s: Role %s has other rules in %s", f.file, name, r.Namespace)
				}
			}
			for _, rule := range rules {
				row(f.manifest, "Role `"+name+"` in "+strings.Join(where[name], ", "), rule)
			}
		}
	}
	return b.String(), nil
}
