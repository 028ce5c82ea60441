package drivertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kubewire/kubewire/internal/kubetest"
	"github.com/kubewire/kubewire/internal/sandboxtest"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
)

// APIServer is a scripted Kubernetes API server on a real socket. It
// serves the Sandbox version it is given, fence NetworkPolicies and Event
// creation; any other request fails the test. It counts mutations.
type APIServer struct {
	t       testing.TB
	version string
	srv     *httptest.Server

	// Mu guards the fields below; the scripted state is the test's to edit.
	Mu        sync.Mutex
	rv        int
	Sandboxes map[string]map[string]any // ns/name
	fences    map[string]map[string]any // ns
	Requests  map[string]int            // "METHOD kind"
	// Fail, when set, answers instead of the script for requests it
	// returns true for.
	Fail func(w http.ResponseWriter, r *http.Request) bool
}

var group = sandboxv1beta1.GroupVersion.Group

func NewAPIServer(t testing.TB, version string) *APIServer {
	a := &APIServer{t: t, version: version, Sandboxes: map[string]map[string]any{}, fences: map[string]map[string]any{}, Requests: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *APIServer) Config() *rest.Config { return &rest.Config{Host: a.srv.URL, QPS: -1} }

func (a *APIServer) Count(key string) int {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return a.Requests[key]
}

// total counts every request.
func (a *APIServer) Total() int {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	n := 0
	for _, v := range a.Requests {
		n += v
	}
	return n
}

// mutations counts PATCH, POST, PUT and DELETE requests.
func (a *APIServer) Mutations() int {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	n := 0
	for k, v := range a.Requests {
		m := strings.Fields(k)[0]
		if m == http.MethodPatch || m == http.MethodPost || m == http.MethodPut || m == http.MethodDelete {
			n += v
		}
	}
	return n
}

func (a *APIServer) NextRV() string {
	a.rv++
	return strconv.Itoa(a.rv)
}

func (a *APIServer) AddFence(ns, uid string, gen int64) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.fences[ns] = map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": driver.DefaultFenceName, "namespace": ns, "uid": uid, "generation": gen, "resourceVersion": a.NextRV()},
		"spec":     map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Egress"}},
	}
}

// addSandbox stores a sandbox owned by gateway "gw" admitted under fence
// (uid, gen), running or suspended, with a status that says so.
func (a *APIServer) AddSandbox(ns, name string, running bool, fenceUID string, fenceGen int64) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	spec := map[string]any{"operatingMode": "Running"}
	if a.version == "v1alpha1" {
		spec = map[string]any{"replicas": int64(1)}
	}
	// The conditions the real controllers write (DESIGN 5a): v0.5+ for
	// v1beta1, v0.4.x for v1alpha1, which reports Ready for replicas 0.
	cond := func(typ, status, reason string) any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "observedGeneration": int64(1), "lastTransitionTime": "2026-11-29T12:00:00Z", "message": ""}
	}
	conds := []any{cond("Suspended", "False", sandboxv1beta1.SandboxReasonNotSuspended), cond("Ready", "True", sandboxv1beta1.SandboxReasonDependenciesReady)}
	if a.version == "v1alpha1" {
		conds = []any{cond("Ready", "True", sandboxv1beta1.SandboxReasonDependenciesReady)}
	}
	if !running {
		spec = map[string]any{"operatingMode": "Suspended"}
		if a.version == "v1alpha1" {
			spec = map[string]any{"replicas": int64(0)}
		} else {
			conds = []any{cond("Suspended", "True", sandboxv1beta1.SandboxReasonSuspendedPodTerminated), cond("Ready", "False", sandboxv1beta1.SandboxReasonSuspended)}
		}
	}
	a.Sandboxes[ns+"/"+name] = map[string]any{
		"apiVersion": group + "/" + a.version, "kind": "Sandbox",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "uid": "uid-" + name, "generation": int64(1), "resourceVersion": a.NextRV(),
			"labels": map[string]any{driver.LabelManagedBy: driver.DefaultDriverName, driver.LabelGateway: "gw"},
			"annotations": map[string]any{
				driver.AnnotationFenceUID:        fenceUID,
				driver.AnnotationFenceGeneration: strconv.FormatInt(fenceGen, 10),
			},
		},
		"spec":   spec,
		"status": map[string]any{"conditions": conds},
	}
}

func (a *APIServer) Sandbox(ns, name string) map[string]any {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return a.Sandboxes[ns+"/"+name]
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func Status(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": msg, "code": code})
}

// bodies keeps the last request body, for fail hooks.
var lastBody sync.Map

func ReadBody(r *http.Request) string {
	v, _ := lastBody.Load(r)
	s, _ := v.(string)
	return s
}

var env *kubetest.Env

// Main runs the package's tests with a kube-apiserver that serves
// agent-sandbox's Sandbox CRD; call it from TestMain.
func Main(m *testing.M) {
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, &env, crd)
}

func (a *APIServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	lastBody.Store(r, string(body))
	defer lastBody.Delete(r)
	a.Mu.Lock()
	fail := a.Fail
	a.Mu.Unlock()
	if fail != nil && fail(w, r) {
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	a.Mu.Lock()
	defer a.Mu.Unlock()
	record := func(kind string) { a.Requests[r.Method+" "+kind]++ }
	switch {
	// Version probe: /apis/agents.x-k8s.io/<v>
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "apis" && parts[1] == group:
		record("probe")
		if parts[2] != a.version {
			Status(w, 404, "NotFound", "the server could not find the requested resource")
			return
		}
		writeJSON(w, 200, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group + "/" + a.version,
			"resources": []any{map[string]any{"name": "sandboxes", "namespaced": true, "kind": "Sandbox", "verbs": []any{"get", "list", "patch", "create", "delete"}}}})
		return

	// Fence: /apis/networking.k8s.io/v1/namespaces/<ns>/networkpolicies/<name>
	case r.Method == http.MethodGet && len(parts) == 7 && parts[1] == "networking.k8s.io" && parts[5] == "networkpolicies":
		record("fence")
		f, ok := a.fences[parts[4]]
		if !ok || parts[6] != driver.DefaultFenceName {
			Status(w, 404, "NotFound", "networkpolicies not found")
			return
		}
		writeJSON(w, 200, f)
		return

	// Events: /apis/events.k8s.io/v1/namespaces/<ns>/events
	case r.Method == http.MethodPost && len(parts) == 6 && parts[1] == "events.k8s.io" && parts[5] == "events":
		record("event")
		var ev map[string]any
		_ = json.Unmarshal(body, &ev)
		writeJSON(w, 201, ev)
		return

	// Sandboxes: /apis/agents.x-k8s.io/<v>/namespaces/<ns>/sandboxes[/<name>]
	case len(parts) >= 6 && parts[1] == group && parts[2] == a.version && parts[5] == "sandboxes":
		ns := parts[4]
		if len(parts) == 6 && r.Method == http.MethodGet {
			record("list")
			a.list(w, r, ns)
			return
		}
		if len(parts) != 7 {
			break
		}
		obj, ok := a.Sandboxes[ns+"/"+parts[6]]
		switch r.Method {
		case http.MethodGet:
			record("get")
			if !ok {
				Status(w, 404, "NotFound", "sandboxes not found")
				return
			}
			writeJSON(w, 200, obj)
			return
		case http.MethodPatch:
			record("patch")
			if !ok {
				Status(w, 404, "NotFound", "sandboxes not found")
				return
			}
			var patch map[string]any
			if err := json.Unmarshal(body, &patch); err != nil || r.Header.Get("Content-Type") != "application/merge-patch+json" {
				Status(w, 400, "BadRequest", "want a JSON merge patch")
				return
			}
			meta := obj["metadata"].(map[string]any)
			if rv, _ := patch["metadata"].(map[string]any)["resourceVersion"].(string); rv != meta["resourceVersion"] {
				Status(w, 409, "Conflict", "the object has been modified")
				return
			}
			merge(obj, patch)
			meta["resourceVersion"] = a.NextRV()
			if _, ok := patch["spec"]; ok {
				meta["generation"] = meta["generation"].(int64) + 1
			}
			writeJSON(w, 200, obj)
			return
		}
	}
	a.t.Errorf("scripted API server: unexpected request %s %s", r.Method, r.URL)
	Status(w, 500, "InternalError", "unexpected request")
}

func (a *APIServer) list(w http.ResponseWriter, r *http.Request, ns string) {
	sel := r.URL.Query().Get("labelSelector")
	if !strings.Contains(sel, driver.LabelGateway+"=gw") || !strings.Contains(sel, driver.LabelManagedBy+"="+driver.DefaultDriverName) {
		a.t.Errorf("list without the owner selector: %q", sel)
	}
	var names []string
	for k := range a.Sandboxes {
		if strings.HasPrefix(k, ns+"/") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	start := 0
	if c := r.URL.Query().Get("continue"); c != "" {
		start, _ = strconv.Atoi(c)
	}
	limit := len(names)
	if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && l > 0 {
		limit = l
	}
	end := min(start+limit, len(names))
	items := make([]any, 0, end-start)
	for _, k := range names[start:end] {
		items = append(items, a.Sandboxes[k])
	}
	meta := map[string]any{"resourceVersion": strconv.Itoa(a.rv)}
	if end < len(names) {
		meta["continue"] = strconv.Itoa(end)
	}
	writeJSON(w, 200, map[string]any{"apiVersion": group + "/" + a.version, "kind": "SandboxList", "metadata": meta, "items": items})
}

// merge applies a JSON merge patch (RFC 7386) to dst.
func merge(dst, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			merge(dm, pm)
			continue
		}
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			v = int64(f)
		}
		dst[k] = v
	}
}

// StaleFixture is an API server of version on which both namespaces'
// fences are at generation 2; every sandbox was admitted under generation
// 1, running or not.
func StaleFixture(t *testing.T, version string, running bool) *APIServer {
	a := NewAPIServer(t, version)
	a.AddFence("team-a", "fence-a", 2)
	a.AddFence("team-b", "fence-b", 2)
	for i := 0; i < 4; i++ {
		a.AddSandbox("team-a", fmt.Sprintf("sb-%d", i), running, "fence-a", 1)
	}
	a.AddSandbox("team-b", "sb-x", running, "fence-b", 1)
	return a
}
