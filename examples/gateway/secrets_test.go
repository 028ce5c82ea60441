package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestRunKeepsCredentialsOut runs the gateway with a kubeconfig whose
// server URL carries a password and which has a bearer token, drives
// requests that succeed and fail, then cuts it off from the API server,
// and finds neither secret in anything it wrote: its log, client-go's
// (klog) and every answer.
func TestRunKeepsCredentialsOut(t *testing.T) {
	const (
		password = "s3cr3tpass"
		token    = "t0ken-9f8e7d6c5b4a"
	)
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	proxied, proxy := kubetest.Proxied(t, cfg)

	kubeconfig := secretKubeconfig(t, cfg, proxied.Host, password, token)

	var out, klogOut syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&klogOut)
	defer klog.LogToStderr(true)

	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan int, 1)
	go func() {
		exited <- run(runCtx, []string{"-kubeconfig", kubeconfig, "-namespace", ns.Name, "-gateway", "gw-secret", "-listen", "127.0.0.1:0", "-authenticate=false"}, &out)
	}()
	defer func() {
		stop()
		assert.Equal(t, 0, <-exited, "run's exit code")
		all := out.String() + klogOut.String()
		for _, secret := range []string{password, token} {
			assert.NotContains(t, all, secret)
		}
		if t.Failed() {
			t.Logf("the gateway wrote:\n%s", all)
		}
	}()
	var addr string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`msg=serving addr=(\S+)`).FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "the gateway never served:\n%s", &out)

	base := "http://" + addr + "/v1/namespaces/" + ns.Name + "/sandboxes"
	do := func(method, url, body string) int {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		for _, secret := range []string{password, token} {
			assert.NotContains(t, string(b), secret, "%s %s", method, url)
			for k, v := range resp.Header {
				assert.NotContains(t, strings.Join(v, " "), secret, "header %s of %s %s", k, method, url)
			}
		}
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusCreated, do(http.MethodPost, base, `{"name":"alpha","podTemplate":`+template+`}`))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, base+"/alpha", ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, base, ""))
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, base+"/beta", ""))
	assert.Equal(t, http.StatusConflict, do(http.MethodPost, base, `{"name":"alpha","podTemplate":`+template+`}`))
	assert.Equal(t, http.StatusBadRequest, do(http.MethodPost, base, `{"name":"beta","podTemplat":{}}`))
	assert.Equal(t, http.StatusBadRequest, do(http.MethodGet, "http://"+addr+"/v1/namespaces/elsewhere/sandboxes", ""))

	// Cut off: every connection to the API server is reset as it is used.
	proxy.SetFault(transporttest.ResetBeforeForward)
	proxy.ResetAll()
	assert.Equal(t, http.StatusServiceUnavailable, do(http.MethodGet, base+"/alpha", ""))
	assert.Equal(t, http.StatusServiceUnavailable, do(http.MethodPost, base+"/alpha/stop", ""))
	assert.Equal(t, http.StatusServiceUnavailable, do(http.MethodDelete, base+"/alpha", ""))
	// Each error answer is logged once written.
	assert.Eventually(t, func() bool { return strings.Count(out.String(), "msg=\"request failed\"") >= 3 }, 10*time.Second, 5*time.Millisecond, "the failures' log lines")
}

// secretKubeconfig writes a kubeconfig for the API server at host, as
// cfg's user, with password in the server URL and token as a bearer
// token, and returns its path.
func secretKubeconfig(t *testing.T, cfg *rest.Config, host, password, token string) string {
	t.Helper()
	// The client certificate authenticates; the API server tries it
	// before the token, which it does not know.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: strings.Replace(host, "https://", "https://kubewire:"+password+"@", 1), CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
	return kubeconfig
}

// TestRunBadServerURLKeepsPasswordOut: a kubeconfig the gateway cannot
// use, its server URL with a password, gives an error without the
// password: masked as net/http masks it (user:***), where client-go
// quotes a URL that does not parse.
func TestRunBadServerURLKeepsPasswordOut(t *testing.T) {
	const password = "s3cr3tpass"
	tests := []struct {
		name string
		give string // the cluster of the kubeconfig
		want string
	}{
		{"bad port", `{server: "https://kubewire:s3cr3tpass@127.0.0.1:bad"}`,
			`gateway: driver: host must be a URL or a host:port pair: "https://kubewire:***@127.0.0.1:bad"`},
		{"bad escape", `{server: "https://kubewire:s3cr3tpass@127.0.0.1:1/x%zz"}`,
			`gateway: driver: parse "http://https://kubewire:***@127.0.0.1:1/x%zz": invalid URL escape "%zz"`},
		{"quoted", `{server: "https://kubewire:s3cr3t\"pass@[::1"}`,
			`gateway: driver: host must be a URL or a host:port pair: "https://kubewire:***@[::1"`},
		{"no scheme", `{server: "kubewire:s3cr3tpass@127.0.0.1:1/x%zz"}`,
			`gateway: driver: parse "http://kubewire:***@127.0.0.1:1/x%zz": invalid URL escape "%zz"`},
		{"missing CA", `{server: "https://kubewire:s3cr3tpass@127.0.0.1:1", certificate-authority: /nonexistent/ca.crt}`,
			"gateway: loading kubeconfig: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: `+tt.give+`}]
users: [{name: u, user: {token: t0ken-9f8e7d6c5b4a}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
			var out strings.Builder
			assert.NotZero(t, run(context.Background(), []string{"-kubeconfig", kubeconfig, "-once"}, &out))
			assert.Contains(t, out.String(), tt.want)
			assert.NotContains(t, out.String(), password)
			assert.NotContains(t, out.String(), "s3cr3t")
			assert.NotContains(t, out.String(), "t0ken")
		})
	}
}
