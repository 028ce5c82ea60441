package kubetest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestControlPlane(t *testing.T) {
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		t.Skip("needs kube-apiserver and etcd: KUBEBUILDER_ASSETS is not set; `make test` builds them and sets it")
	}
	// The audit flags stand for any caller's Args: they must reach
	// kube-apiserver as given.
	auditDir := t.TempDir()
	policy := filepath.Join(auditDir, "policy.yaml")
	auditLog := filepath.Join(auditDir, "audit.log")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Read only once stop has waited for the processes, the writers.
	var out bytes.Buffer

	began := time.Now()
	c, err := startControlPlane(controlPlaneOptions{
		BinDir: bin,
		Args:   map[string]string{"audit-policy-file": policy, "audit-log-path": auditLog},
		Output: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("the control plane's last output:\n%s", lastBytes(out.Bytes(), 8<<10))
		}
	})
	t.Logf("started in %v", time.Since(began).Round(time.Millisecond))

	admin := userClient(t, c, "admin", "system:masters")
	alice := userClient(t, c, "alice")
	tests := []struct {
		name   string
		client *http.Client
		path   string
		want   int
	}{
		{name: "admin discovers", client: admin, path: "/api", want: http.StatusOK},
		{name: "admin lists CRDs", client: admin, path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", want: http.StatusOK},
		{name: "RBAC forbids alice", client: alice, path: "/api/v1/namespaces", want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := getStatus(t, tt.client, c.host()+tt.path); got != tt.want {
				t.Errorf("GET %s: status %d, want %d", tt.path, got, tt.want)
			}
		})
	}

	host := c.host()
	began = time.Now()
	if err := c.restartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(began).Round(time.Millisecond))
	if c.host() != host {
		t.Errorf("after the restart host is %s, want %s", c.host(), host)
	}
	if got := getStatus(t, admin, host+"/api"); got != http.StatusOK {
		t.Errorf("after the restart GET /api: status %d, want 200", got)
	}

	began = time.Now()
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(began).Round(time.Millisecond))
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second); err == nil {
		conn.Close()
		t.Errorf("after stop %s accepts connections", u.Host)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after stop dialing %s: %v, want connection refused", u.Host, err)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after stop %s: %v, want it gone", c.dir, err)
	}
	if err := c.stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if out.Len() == 0 {
		t.Error("Output received nothing")
	}
	logged, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatalf("audit-log-path did not reach kube-apiserver: %v", err)
	}
	if !bytes.Contains(logged, []byte(`"username":"alice"`)) {
		t.Errorf("the audit log has no event of alice:\n%s", lastBytes(logged, 2<<10))
	}
}

// A kube-apiserver that cannot start must fail startControlPlane with its
// own words, and leave no process or file behind.
func TestControlPlaneStartFails(t *testing.T) {
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		t.Skip("needs kube-apiserver and etcd: KUBEBUILDER_ASSETS is not set; `make test` builds them and sets it")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	c, err := startControlPlane(controlPlaneOptions{BinDir: bin, Args: map[string]string{"service-cluster-ip-range": "bogus"}})
	if err == nil {
		c.stop()
		t.Fatal("started with service-cluster-ip-range=bogus")
	}
	var se *startError
	if !errors.As(err, &se) || se.name != "kube-apiserver" || !se.exited {
		t.Errorf("error %v, want kube-apiserver's early exit", err)
	}
	if !strings.Contains(err.Error(), "is not a valid cidr") {
		t.Errorf("error lacks kube-apiserver's own words:\n%v", err)
	}
	if strings.Contains(err.Error(), "attempt 2") {
		t.Errorf("a bad flag was tried again:\n%v", err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("left in TMPDIR: %v %v", left, err)
	}
	// Linux lists a thread's live children here; the other systems skip it.
	lists, _ := filepath.Glob("/proc/self/task/*/children")
	for _, l := range lists {
		if b, err := os.ReadFile(l); err == nil && len(bytes.TrimSpace(b)) > 0 {
			t.Errorf("processes left running: %s", b)
		}
	}
}

// userClient is a client of c as name in groups that trusts only c's CA.
func userClient(t *testing.T, c *controlPlane, name string, groups ...string) *http.Client {
	t.Helper()
	certPEM, keyPEM, err := c.addUser(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.caPEM()) {
		t.Fatal("caPEM holds no certificate")
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		// Each request dials: the one after the restart must not meet a
		// connection the old process closed.
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
			DisableKeepAlives: true,
		},
	}
}

func getStatus(t *testing.T, client *http.Client, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func lastBytes(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
