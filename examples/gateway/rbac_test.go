package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
