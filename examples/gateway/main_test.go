package main

import (
	"context"
	"fmt"
	"io"
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
	checkNotOwned(t, c, cfg, ns.Name, base)

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

// checkNotOwned has another gateway create a sandbox in ns, and checks
// that c's gateway, serving ns at base, answers every route for it as it
// answers for a sandbox that does not exist.
func checkNotOwned(t *testing.T, c client, cfg *rest.Config, ns, base string) {
	t.Helper()
	other, err := driver.New(cfg, "gw-other", []string{ns})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Create(context.Background(), ns, "theirs", sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}}})
	require.NoError(t, err)
	for _, r := range []struct{ method, path, op string }{
		{http.MethodGet, "/theirs", "get"}, {http.MethodGet, "/nobody", "get"},
		{http.MethodPost, "/theirs/stop", "stop"}, {http.MethodPost, "/nobody/stop", "stop"},
		{http.MethodPost, "/theirs/start", "start"}, {http.MethodDelete, "/theirs", "delete"},
	} {
		code, body := c.do(r.method, base+r.path, "")
		name := strings.Split(r.path, "/")[1]
		assert.Equal(t, http.StatusNotFound, code, "%s %s: %v", r.method, r.path, body)
		assert.Equal(t, "not found", body["kind"], "%s %s", r.method, r.path)
		assert.Equal(t, fmt.Sprintf("driver: %s sandbox %s/%s: not found", r.op, ns, name), body["error"], "%s %s", r.method, r.path)
	}
	_, err = other.Get(context.Background(), ns, "theirs")
	require.NoError(t, err, "the other gateway's sandbox is still there")
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
	// bytes (the TLS handshake): kubewire retries on a new one, a retry of
	// class not_sent, since net/http handed the request no connection. (The
	// pooled connection is reset first; a request that takes it before the
	// client has noticed fails on it and is retried too, maybe_sent.)
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
	assert.Regexp(t, `(?m)^kubewire_retry_retries_total\{class="(maybe|not)_sent",method="GET"\} [12]$`, scrape)
	assert.Regexp(t, `(?m)^kubewire_http_attempts_total\{method="GET",outcome="error",protocol="[^"]+",reused="(true|false)"\} 1$`, scrape)
	assert.Contains(t, scrape, "go_goroutines ")
	assert.Contains(t, scrape, "kubewire_reconciler_passes_total 0")
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
