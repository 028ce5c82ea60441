package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
	"github.com/kubewire/kubewire/transport/transporttest"
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
// certificate when it serves HTTPS (auth_test.go), else the default.
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

// TestGatewayEndToEnd drives the gateway's API against a real API server:
// create, stop and start (agent-sandbox's own controller acts, a fake
// kubelet runs the pod), delete, and errors that carry their kind, the
// driver's or the API server's words and an id.
func TestGatewayEndToEnd(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	sandboxtest.RunController(t, cfg, ns.Name)
	kubetest.RunKubelet(t, cfg, ns.Name)
	d, err := driver.New(cfg, "gw-e2e", []string{ns.Name})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), testr.New(t), nil, nil))
	defer srv.Close()
	c := client{t: t, url: srv.URL}
	base := "/v1/namespaces/" + ns.Name + "/sandboxes"

	code, body := c.do(http.MethodPost, base, `{"name":"alpha"}`)
	require.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body["error"], "spec.podTemplate.spec.containers: required")

	code, body = c.do(http.MethodPost, base, `{"name":"alpha","podTemplate":{"spec":{"containers":[{"name":"agent","image":"busybox"}]}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	assert.Equal(t, "Starting", body["phase"])
	assert.Equal(t, true, body["running"])

	c.waitPhase(base+"/alpha", "Ready")

	code, body = c.do(http.MethodPost, base+"/alpha/stop", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, false, body["running"])
	assert.Contains(t, []any{"Stopping", "Stopped"}, body["phase"])
	c.waitPhase(base+"/alpha", "Stopped")

	code, body = c.do(http.MethodPost, base+"/alpha/start", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, true, body["running"])
	assert.Equal(t, "Starting", body["phase"])

	code, _ = c.do(http.MethodGet, base, "")
	require.Equal(t, http.StatusOK, code)

	code, _ = c.do(http.MethodDelete, base+"/alpha", "")
	require.Equal(t, http.StatusNoContent, code)

	code, body = c.do(http.MethodGet, base+"/alpha", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not found", body["kind"])
	assert.Equal(t, fmt.Sprintf("driver: get sandbox %s/alpha: not found", ns.Name), body["error"])
	assert.NotEmpty(t, body["id"])

	// A sandbox another gateway manages is not found either, in the same
	// words, for every route: before, 412 told the caller it exists.
	other, err := driver.New(cfg, "gw-other", []string{ns.Name})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Create(context.Background(), ns.Name, "theirs", sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}}})
	require.NoError(t, err)
	for _, r := range []struct{ method, path, op string }{
		{http.MethodGet, "/theirs", "get"}, {http.MethodGet, "/nobody", "get"},
		{http.MethodPost, "/theirs/stop", "stop"}, {http.MethodPost, "/nobody/stop", "stop"},
		{http.MethodPost, "/theirs/start", "start"}, {http.MethodDelete, "/theirs", "delete"},
	} {
		code, body = c.do(r.method, base+r.path, "")
		name := strings.Split(r.path, "/")[1]
		assert.Equal(t, http.StatusNotFound, code, "%s %s: %v", r.method, r.path, body)
		assert.Equal(t, "not found", body["kind"], "%s %s", r.method, r.path)
		assert.Equal(t, fmt.Sprintf("driver: %s sandbox %s/%s: not found", r.op, ns.Name, name), body["error"], "%s %s", r.method, r.path)
	}
	_, err = other.Get(context.Background(), ns.Name, "theirs")
	require.NoError(t, err, "the other gateway's sandbox is still there")

	code, body = c.do(http.MethodPost, base, `{"name":"Not_A_Label"}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "invalid argument", body["kind"])

	code, body = c.do(http.MethodPost, base, `{"name":`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body["error"], "request body")

	code, body = c.do(http.MethodPost, base, `{"name":"beta","podTemplate":{"spec":{"containers":[{"name":"agent","image":"busybox"}]}},"replicas":2}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body["error"], `unknown field "replicas"`)
	code, _ = c.do(http.MethodGet, base+"/beta", "")
	assert.Equal(t, http.StatusNotFound, code, "a refused create made a sandbox")

	code, body = c.do(http.MethodGet, "/v1/namespaces/elsewhere/sandboxes", "")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "driver: list sandbox elsewhere/: invalid argument: namespace \"elsewhere\" is not served by this gateway", body["error"])
	assert.NotContains(t, body["error"], ns.Name, "the answer names a namespace the gateway serves")
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

// TestGatewayMetrics: /metrics shows the retry kubewire made when the
// connection to the API server was reset.
func TestGatewayMetrics(t *testing.T) {
	cfg, proxy := kubetest.Proxied(t, env.Config(t))
	reg, m, _ := newRegistry()
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithObserver(m)))
	d, err := driver.New(cfg, "gw-metrics", []string{"default"})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(newHandler(d, reg, testr.New(t), nil, nil))
	defer srv.Close()
	c := client{t: t, url: srv.URL}

	code, _ := c.do(http.MethodGet, "/v1/namespaces/default/sandboxes", "")
	require.Equal(t, http.StatusOK, code)
	// The next connection is reset as the API server answers its first
	// bytes (the TLS handshake): kubewire retries on a new one. (The pooled
	// connection is reset first; a request that takes it before the client
	// has noticed fails on it and is retried too.)
	proxy.ResetAll()
	proxy.SetFaultOnce(transporttest.ResetAfterResponse)
	code, _ = c.do(http.MethodGet, "/v1/namespaces/default/sandboxes", "")
	require.Equal(t, http.StatusOK, code)

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	scrape := string(b)
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, "kubewire_") && !strings.Contains(line, "_bucket") {
			t.Log(line)
		}
	}
	assert.Regexp(t, `(?m)^kubewire_retry_retries_total\{class="maybe_sent",method="GET"\} [12]$`, scrape)
	assert.Regexp(t, `(?m)^kubewire_http_attempts_total\{method="GET",outcome="error",protocol="[^"]+",reused="(true|false)"\} 1$`, scrape)
	assert.Contains(t, scrape, "go_goroutines ")
	assert.Contains(t, scrape, "kubewire_reconciler_passes_total 0")
}

func TestRunBadFlags(t *testing.T) {
	var errOut strings.Builder
	assert.Equal(t, 2, run(context.Background(), []string{"-nope"}, &errOut))
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-namespace", "Bad_NS"}, &errOut))
	assert.Contains(t, errOut.String(), `driver: namespace "Bad_NS" is not a valid namespace name`)
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-period", "200ms"}, &errOut))
	assert.Contains(t, errOut.String(), "reconciler: WithPeriod must be at least 1s, got 200ms")
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-replicas", "2", "-lease-name", "Bad_Name"}, &errOut))
	assert.Contains(t, errOut.String(), `reconciler: WithLeaderElection Name "Bad_Name" is not a valid object name`)
	for _, tt := range []struct {
		give []string
		want string
	}{
		{[]string{"-shutdown-grace", "0s"}, "gateway: -shutdown-grace must be positive, got 0s"},
		{[]string{"-read-timeout", "0s"}, "gateway: -read-timeout must be positive, got 0s"},
		{[]string{"-request-timeout", "-1s"}, "gateway: -request-timeout must be positive, got -1s"},
		{[]string{"-write-timeout", "0s"}, "gateway: -write-timeout must be positive, got 0s"},
		{[]string{"-idle-timeout", "-5m"}, "gateway: -idle-timeout must be positive, got -5m0s"},
		{[]string{"-request-timeout", "1m"}, "gateway: -request-timeout 1m0s must be less than -write-timeout 1m0s"},
		{[]string{"-write-timeout", "10s"}, "gateway: -read-timeout 30s must be less than -write-timeout 10s"},
		{[]string{"-write-timeout", "40s"}, "gateway: -request-timeout 50s must be less than -write-timeout 40s"},
		{[]string{"-read-timeout", "2s", "-request-timeout", "500ms", "-write-timeout", "1s"}, "gateway: -read-timeout 2s must be less than -write-timeout 1s"},
		{[]string{"-read-timeout", "1s", "-request-timeout", "500ms", "-write-timeout", "1s"}, "gateway: -read-timeout 1s must be less than -write-timeout 1s"},
	} {
		errOut.Reset()
		assert.Equal(t, 2, run(context.Background(), tt.give, &errOut), "%v", tt.give)
		assert.Contains(t, errOut.String(), tt.want, "%v", tt.give)
	}
}

// TestRunErrorStopsWhatItStarted: run returns 2 for a certificate it
// cannot load with nothing of its own running: before, the reconciler's
// goroutine, started first, was still running when run returned.
func TestRunErrorStopsWhatItStarted(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(cert, []byte("not a certificate"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte("not a key"), 0o600))
	var errOut strings.Builder
	code := run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-listen", "127.0.0.1:0",
		"-tls-cert-file", cert, "-tls-key-file", key}, &errOut)
	buf := make([]byte, 1<<20)
	self, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), " [")
	// Started by run or by a function of the package it called (serve,
	// watchCert, startReconciler).
	started := regexp.MustCompile(`created by github\.com/kubewire/kubewire/examples/gateway\.\S+ in ` + self + "\n")
	assert.Equal(t, 2, code, errOut.String())
	assert.Contains(t, errOut.String(), "-tls-cert-file")
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		assert.NotRegexp(t, started, g, "a goroutine run started outlived it")
	}
}

// TestTwoReplicas runs two gateways as replicas of one: they elect a
// leader, and a fence change suspends each running sandbox once, with one
// Event each.
func TestTwoReplicas(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sandboxtest.RunController(t, cfg, ns.Name)
	kubetest.RunKubelet(t, cfg, ns.Name)
	kubeconfig := kubetest.WriteKubeconfig(t, cfg)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	outs := make([]*syncBuffer, 2)
	for i := range outs {
		outs[i] = &syncBuffer{}
		wg.Go(func() {
			args := []string{"-kubeconfig", kubeconfig, "-namespace", ns.Name, "-gateway", "gw-2r", "-replicas", "2", "-listen", "127.0.0.1:0"}
			assert.Equal(t, 0, run(runCtx, args, outs[i]), "replica %d", i)
		})
	}
	defer wg.Wait()
	defer stop()

	d, err := driver.New(cfg, "gw-2r", []string{ns.Name})
	require.NoError(t, err)
	defer d.Close()
	tmpl := sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}}}
	names := []string{"a", "b", "c"}
	for _, name := range names {
		_, err := d.Create(ctx, ns.Name, name, tmpl)
		require.NoError(t, err)
	}
	eventually := func(what string, ok func(driver.Sandbox) bool) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, name := range names {
				s, err := d.Get(ctx, ns.Name, name)
				require.NoError(c, err)
				assert.True(c, ok(s), "%s: %+v", name, s)
			}
		}, 30*time.Second, 20*time.Millisecond, what)
	}
	sandboxes, err := versioned.NewForConfig(cfg)
	require.NoError(t, err)
	eventually("ready, bootstrap cleared by the leader", func(s driver.Sandbox) bool {
		obj, err := sandboxes.AgentsV1beta1().Sandboxes(ns.Name).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		_, started := obj.Annotations[annotationBootstrapStarted]
		return s.Phase == driver.PhaseReady && !started
	})
	np, err := cs.NetworkingV1().NetworkPolicies(ns.Name).Get(ctx, fenceName, metav1.GetOptions{})
	require.NoError(t, err)
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	_, err = cs.NetworkingV1().NetworkPolicies(ns.Name).Update(ctx, np, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually("suspended", func(s driver.Sandbox) bool { return !s.Running })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := cs.EventsV1().Events(ns.Name).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		per := map[string]int{}
		for _, ev := range list.Items {
			if ev.Reason == "StaleFence" {
				per[ev.Regarding.Name]++
				assert.Nil(c, ev.Series, "one occurrence, not a repeat")
			}
		}
		assert.Equal(c, map[string]int{"a": 1, "b": 1, "c": 1}, per)
	}, 30*time.Second, 20*time.Millisecond)
	leaders := 0
	for _, o := range outs {
		leaders += strings.Count(o.String(), "msg=leading")
	}
	assert.Equal(t, 1, leaders, "one replica leads:\n%s\n%s", outs[0], outs[1])
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
