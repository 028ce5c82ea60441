package driver_test

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

// apiServer is a scripted Kubernetes API server on a real socket. It
// serves the Sandbox version it is given, fence NetworkPolicies and Event
// creation; any other request fails the test. It counts mutations.
type apiServer struct {
	t       testing.TB
	version string
	srv     *httptest.Server

	mu        sync.Mutex
	rv        int
	sandboxes map[string]map[string]any // ns/name
	fences    map[string]map[string]any // ns
	requests  map[string]int            // "METHOD kind"
	// fail, when set, answers instead of the script for requests it
	// returns true for.
	fail func(w http.ResponseWriter, r *http.Request) bool
}

var group = sandboxv1beta1.GroupVersion.Group

func newAPIServer(t testing.TB, version string) *apiServer {
	a := &apiServer{t: t, version: version, sandboxes: map[string]map[string]any{}, fences: map[string]map[string]any{}, requests: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *apiServer) config() *rest.Config { return &rest.Config{Host: a.srv.URL, QPS: -1} }

func (a *apiServer) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests[key]
}

// total counts every request.
func (a *apiServer) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.requests {
		n += v
	}
	return n
}

// mutations counts PATCH, POST, PUT and DELETE requests.
func (a *apiServer) mutations() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for k, v := range a.requests {
		m := strings.Fields(k)[0]
		if m == http.MethodPatch || m == http.MethodPost || m == http.MethodPut || m == http.MethodDelete {
			n += v
		}
	}
	return n
}

func (a *apiServer) nextRV() string {
	a.rv++
	return strconv.Itoa(a.rv)
}

func (a *apiServer) addFence(ns, uid string, gen int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fences[ns] = map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": driver.DefaultFenceName, "namespace": ns, "uid": uid, "generation": gen, "resourceVersion": a.nextRV()},
		"spec":     map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Egress"}},
	}
}

// addSandbox stores a sandbox owned by gateway "gw" admitted under fence
// (uid, gen), running or suspended, with a status that says so.
func (a *apiServer) addSandbox(ns, name string, running bool, fenceUID string, fenceGen int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
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
	a.sandboxes[ns+"/"+name] = map[string]any{
		"apiVersion": group + "/" + a.version, "kind": "Sandbox",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "uid": "uid-" + name, "generation": int64(1), "resourceVersion": a.nextRV(),
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

func (a *apiServer) sandbox(ns, name string) map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sandboxes[ns+"/"+name]
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": msg, "code": code})
}

// bodies keeps the last request body, for fail hooks.
var lastBody sync.Map

func readBody(r *http.Request) string {
	v, _ := lastBody.Load(r)
	s, _ := v.(string)
	return s
}

var env *kubetest.Env

func runMain(m *testing.M) {
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, &env, crd)
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	lastBody.Store(r, string(body))
	defer lastBody.Delete(r)
	a.mu.Lock()
	fail := a.fail
	a.mu.Unlock()
	if fail != nil && fail(w, r) {
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	a.mu.Lock()
	defer a.mu.Unlock()
	record := func(kind string) { a.requests[r.Method+" "+kind]++ }
	switch {
	// Version probe: /apis/agents.x-k8s.io/<v>
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "apis" && parts[1] == group:
		record("probe")
		if parts[2] != a.version {
			status(w, 404, "NotFound", "the server could not find the requested resource")
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
			status(w, 404, "NotFound", "networkpolicies not found")
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
		obj, ok := a.sandboxes[ns+"/"+parts[6]]
		switch r.Method {
		case http.MethodGet:
			record("get")
			if !ok {
				status(w, 404, "NotFound", "sandboxes not found")
				return
			}
			writeJSON(w, 200, obj)
			return
		case http.MethodPatch:
			record("patch")
			if !ok {
				status(w, 404, "NotFound", "sandboxes not found")
				return
			}
			var patch map[string]any
			if err := json.Unmarshal(body, &patch); err != nil || r.Header.Get("Content-Type") != "application/merge-patch+json" {
				status(w, 400, "BadRequest", "want a JSON merge patch")
				return
			}
			meta := obj["metadata"].(map[string]any)
			if rv, _ := patch["metadata"].(map[string]any)["resourceVersion"].(string); rv != meta["resourceVersion"] {
				status(w, 409, "Conflict", "the object has been modified")
				return
			}
			merge(obj, patch)
			meta["resourceVersion"] = a.nextRV()
			if _, ok := patch["spec"]; ok {
				meta["generation"] = meta["generation"].(int64) + 1
			}
			writeJSON(w, 200, obj)
			return
		}
	}
	a.t.Errorf("scripted API server: unexpected request %s %s", r.Method, r.URL)
	status(w, 500, "InternalError", "unexpected request")
}

func (a *apiServer) list(w http.ResponseWriter, r *http.Request, ns string) {
	sel := r.URL.Query().Get("labelSelector")
	if !strings.Contains(sel, driver.LabelGateway+"=gw") || !strings.Contains(sel, driver.LabelManagedBy+"="+driver.DefaultDriverName) {
		a.t.Errorf("list without the owner selector: %q", sel)
	}
	var names []string
	for k := range a.sandboxes {
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
		items = append(items, a.sandboxes[k])
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
