package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// blackHole is an API server that stopped answering: a loopback listener
// that accepts connections, never writes to them and holds them open until
// the test ends.
type blackHole struct {
	Addr string
	// accepted receives a value for each connection accepted.
	accepted chan struct{}
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackHole{Addr: ln.Addr().String(), accepted: make(chan struct{}, 100)}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case b.accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return b
}

// writeKubeconfig writes a kubeconfig for cluster, with token as the
// user's bearer token if it is set, and returns its path. clientcmd gives
// the token only to a server on TLS.
func writeKubeconfig(t *testing.T, cluster *clientcmdapi.Cluster, token string) string {
	t.Helper()
	return writeKubeconfigUser(t, cluster, &clientcmdapi.AuthInfo{Token: token})
}

// writeKubeconfigUser writes a kubeconfig for cluster and user, and
// returns its path.
func writeKubeconfigUser(t *testing.T, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = cluster
	kc.AuthInfos["test"] = user
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// TestProbeBounded: whatever the server does, the probe ends. A server
// that never answers fails the first warm-up after -timeout, so the probe
// ends well within (gaps + 2) × -timeout. One that answers the warm-up and
// never the list takes the warm-up, the gap and the longest list: stock
// client-go's is bounded by -timeout, kubewire's by its retry loop
// (retryRoom), whose stalled attempts are re-sent on new connections.
func TestProbeBounded(t *testing.T) {
	const timeout = 2 * time.Second
	tests := []struct {
		name    string
		server  func(t *testing.T) string
		gaps    []string
		timeout time.Duration
		// limit is when the test gives up waiting: what the probe may take,
		// and one -timeout for a loaded machine.
		limit time.Duration
		code  int
		want  []string
	}{
		{
			name:    "black hole",
			server:  func(t *testing.T) string { return "http://" + newBlackHole(t).Addr },
			gaps:    []string{"0s", "1s"},
			timeout: time.Second,
			limit:   (2 + 2) * time.Second,
			code:    1,
			want: []string{
				"kubewire probe: client-go cannot reach the API server: no answer within the 1s -timeout:",
				"kubewire probe: kubewire cannot reach the API server:",
			},
		},
		{
			name: "list never answered",
			server: func(t *testing.T) string {
				release := make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/version" {
						_, _ = io.WriteString(w, `{"major":"1","minor":"37"}`)
						return
					}
					select {
					case <-r.Context().Done():
					case <-release:
					}
				}))
				t.Cleanup(srv.Close)
				t.Cleanup(func() { close(release) })
				return srv.URL
			},
			gaps: []string{"0s"},
			// Room for the warm-up to succeed on a loaded machine.
			timeout: timeout,
			limit:   timeout + retryRoom(timeout) + timeout,
			code:    0,
			want: []string{
				`"outcome": "error"`,
				"no answer within the 2s -timeout",
				"(attempts exhausted)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			path := writeKubeconfig(t, &clientcmdapi.Cluster{Server: tt.server(t)}, "")
			limit := tt.limit
			args := []string{"probe", "-kubeconfig", path, "-gaps", strings.Join(tt.gaps, ","), "-timeout", tt.timeout.String(), "-json"}
			var out, errOut strings.Builder
			done := make(chan int, 1)
			start := time.Now()
			go func() { done <- run(context.Background(), args, &out, &errOut) }()
			var code int
			select {
			case code = <-done:
			case <-time.After(limit):
				t.Fatalf("kubewire %s: still running after %v", strings.Join(args, " "), limit)
			}
			t.Logf("exited %d after %v with -timeout %v", code, time.Since(start).Round(time.Millisecond), tt.timeout)
			assert.Equal(t, tt.code, code, errOut.String())
			for _, want := range tt.want {
				assert.Contains(t, out.String()+errOut.String(), want)
			}
		})
	}
}

// TestProbeInterrupt runs the command as a process against a server that
// never answers and interrupts it once, as Ctrl-C does.
func TestProbeInterrupt(t *testing.T) {
	bh := newBlackHole(t)
	path := writeKubeconfig(t, &clientcmdapi.Cluster{Server: "http://" + bh.Addr}, "")

	cmd := command(t, "probe", "-kubeconfig", path, "-gaps", "0s", "-timeout", "10m")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Both probers are waiting for an answer.
	for range 2 {
		select {
		case <-bh.accepted:
		case <-exited:
			t.Fatalf("exited before it was interrupted: %v\n%s", waitErr, stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("no connection to the black hole after a minute")
		}
	}

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	start := time.Now()
	// It must end within a second; 5s keeps a loaded machine from failing
	// the test, and the log says how long it took.
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5s after one SIGINT")
	}
	t.Logf("exited %v after SIGINT", time.Since(start).Round(time.Millisecond))
	var exit *exec.ExitError
	require.True(t, errors.As(waitErr, &exit), "exit: %v", waitErr)
	assert.Equal(t, 130, exit.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "kubewire probe: interrupted")
	// The race detector turns only an exit 0 into 66: with 130 its report
	// is in stderr alone.
	assert.NotContains(t, stderr.String(), "WARNING: DATA RACE")
}

// fakeAPI is a TLS server that answers the probe's two requests when they
// carry the credentials the kubeconfig gives: basic auth from userinfo in
// the server URL, or a bearer token.
func fakeAPI(t *testing.T, user, password, token string) *clientcmdapi.Cluster {
	t.Helper()
	c := tlsCluster(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			assert.Equal(t, "Bearer "+token, r.Header.Get("Authorization"))
		} else {
			u, p, ok := r.BasicAuth()
			assert.True(t, ok && u == user && p == password, "basic auth from the URL: %q", r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/version":
			_, _ = io.WriteString(w, `{"major":"1","minor":"37"}`)
		case "/api/v1/namespaces":
			_, _ = io.WriteString(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	if user != "" {
		c.Server = strings.Replace(c.Server, "://", "://"+user+":"+password+"@", 1)
	}
	return c
}

// tlsCluster serves h over TLS on loopback until the test ends, and
// returns the cluster entry of a kubeconfig for it.
func tlsCluster(t *testing.T, h http.Handler) *clientcmdapi.Cluster {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
}

// TestProbeRedacts: the credentials in a kubeconfig appear nowhere in what
// the probe prints, report or error, text or JSON; a password in the
// server URL is masked as net/http masks it.
func TestProbeRedacts(t *testing.T) {
	const (
		password = "s3cr3tpass"
		token    = "t0ken-9f8e7d6c5b4a"
	)
	cluster := func(server string) *clientcmdapi.Cluster { return &clientcmdapi.Cluster{Server: server} }
	tests := []struct {
		name    string
		cluster func(t *testing.T) *clientcmdapi.Cluster
		token   string
		code    int
		want    string
	}{
		{
			name:    "password, server answers",
			cluster: func(t *testing.T) *clientcmdapi.Cluster { return fakeAPI(t, "user", password, "") },
			want:    "https://user:***@127.0.0.1:",
		},
		{
			name:    "password, invalid URL",
			cluster: func(t *testing.T) *clientcmdapi.Cluster { return cluster("http://user:" + password + "@127.0.0.1:bad") },
			code:    1,
			want:    "http://user:***@127.0.0.1:bad",
		},
		{
			name:    "password, invalid URL, no scheme",
			cluster: func(t *testing.T) *clientcmdapi.Cluster { return cluster("user:" + password + "@127.0.0.1:bad") },
			code:    1,
			want:    "user:***@127.0.0.1:bad",
		},
		{
			// client-go quotes a host it cannot parse, escaping the quote.
			name: "password with a quote, invalid URL",
			cluster: func(t *testing.T) *clientcmdapi.Cluster {
				return cluster(`https://user:"` + password + "@127.0.0.1:6443")
			},
			code: 1,
			want: "https://user:***@127.0.0.1:6443",
		},
		{
			name: "password with a space, invalid URL",
			cluster: func(t *testing.T) *clientcmdapi.Cluster {
				return cluster("https://user:a " + password + "@127.0.0.1:6443")
			},
			code: 1,
			want: "https://user:***@127.0.0.1:6443",
		},
		{
			name: "password, connection refused",
			cluster: func(t *testing.T) *clientcmdapi.Cluster {
				return cluster(strings.Replace(transporttest.RefusedURL(t), "://", "://user:"+password+"@", 1))
			},
			code: 1,
			want: "http://user:***@127.0.0.1:",
		},
		{
			name: "password, no answer",
			cluster: func(t *testing.T) *clientcmdapi.Cluster {
				return cluster("http://user:" + password + "@" + newBlackHole(t).Addr)
			},
			code: 1,
			want: "http://user:***@127.0.0.1:",
		},
		{
			name:    "token, server answers",
			cluster: func(t *testing.T) *clientcmdapi.Cluster { return fakeAPI(t, "", "", token) },
			token:   token,
			want:    "https://127.0.0.1:",
		},
		{
			name:    "token, no answer",
			cluster: func(t *testing.T) *clientcmdapi.Cluster { return cluster("https://" + newBlackHole(t).Addr) },
			token:   token,
			code:    1,
			want:    "https://127.0.0.1:",
		},
	}
	for _, tt := range tests {
		for _, format := range []string{"text", "json"} {
			t.Run(tt.name+", "+format, func(t *testing.T) {
				t.Setenv("KUBECONFIG", "")
				path := writeKubeconfig(t, tt.cluster(t), tt.token)
				// Room for a server that answers on a loaded machine (a TLS
				// handshake under -race took over 500ms); a short wait for
				// one that does not.
				timeout := "10s"
				if tt.code != 0 {
					timeout = "500ms"
				}
				args := []string{"probe", "-kubeconfig", path, "-gaps", "0s", "-timeout", timeout}
				if format == "json" {
					args = append(args, "-json")
				}
				var out strings.Builder
				code := run(context.Background(), args, &out, &out)
				got := out.String()
				assert.Equal(t, tt.code, code, got)
				assert.NotContains(t, got, password)
				assert.NotContains(t, got, token)
				assert.Contains(t, got, tt.want, "the server is named")
			})
		}
	}
}

// TestProbeKubeconfigList: $KUBECONFIG may list files, which the probe
// merges as kubectl does: a file that is missing is skipped, and only when
// every one is missing does loading fail, naming them.
func TestProbeKubeconfigList(t *testing.T) {
	const token = "t0ken-list-5a4b3c"
	dir := t.TempDir()
	// One file holds the cluster and the context, the other the user the
	// context names; fakeAPI checks that the user's token arrives.
	withCluster := clientcmdapi.NewConfig()
	withCluster.Clusters["test"] = fakeAPI(t, "", "", token)
	withCluster.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	withCluster.CurrentContext = "test"
	withUser := clientcmdapi.NewConfig()
	withUser.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: token}
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	require.NoError(t, clientcmd.WriteToFile(*withCluster, a))
	require.NoError(t, clientcmd.WriteToFile(*withUser, b))
	none1, none2 := filepath.Join(dir, "none1.yaml"), filepath.Join(dir, "none2.yaml")
	list := func(paths ...string) string { return strings.Join(paths, string(filepath.ListSeparator)) }

	tests := []struct {
		name string
		give string
		code int
		want string
	}{
		{"cluster in one file, user in the other", list(a, b), 0, `"mode": "cluster from ` + list(a, b) + `"`},
		{"a missing file", list(a, none1, b), 0, `"outcome": "ok"`},
		{"every file missing", list(none1, none2), 1, "kubewire probe: loading kubeconfig " + list(none1, none2) + ": Config not found: " + none1 + ", " + none2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.give)
			var out, errOut strings.Builder
			code := run(context.Background(), []string{"probe", "-gaps", "0s", "-timeout", "10s", "-json"}, &out, &errOut)
			assert.Equal(t, tt.code, code, errOut.String())
			assert.Contains(t, out.String()+errOut.String(), tt.want)
			assert.NotContains(t, out.String()+errOut.String(), token)
		})
	}
}

// TestProbeRefused: a server that answers and refuses the credentials, or
// the request, is reported as that, not as one the client cannot reach.
func TestProbeRefused(t *testing.T) {
	const token = "t0ken-refused-6f5e4d"
	status := func(code int, reason metav1.StatusReason, msg string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			assert.NoError(t, json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
			}))
		}
	}
	tests := []struct {
		name    string
		handler http.Handler
		want    string // after "kubewire probe: " and the client's name
	}{
		{
			name:    "401",
			handler: status(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized"),
			want:    " with 401 Unauthorized, refusing its credentials: Unauthorized",
		},
		{
			// A proxy in front of the API server answers in text.
			name: "401 in text",
			handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "no entry", http.StatusUnauthorized)
			}),
			want: " with 401 Unauthorized, refusing its credentials: the server has asked for the client to provide credentials",
		},
		{
			name:    "403",
			handler: status(http.StatusForbidden, metav1.StatusReasonForbidden, `forbidden: User "alice" cannot get path "/version"`),
			want:    ` with 403 Forbidden, refusing the request: forbidden: User "alice" cannot get path "/version"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			path := writeKubeconfig(t, tlsCluster(t, tt.handler), token)
			var out, errOut strings.Builder
			code := run(context.Background(), []string{"probe", "-kubeconfig", path, "-gaps", "0s", "-timeout", "10s"}, &out, &errOut)
			assert.Equal(t, 1, code, errOut.String())
			for _, client := range []string{"client-go", "kubewire"} {
				assert.Contains(t, errOut.String(), "kubewire probe: the API server answered "+client+tt.want)
			}
			assert.NotContains(t, errOut.String(), "cannot reach")
			assert.NotContains(t, out.String()+errOut.String(), token)
		})
	}
}

// hangingPlugin is an exec credential plugin that never answers, as one
// waiting for a login in a browser does.
type hangingPlugin struct {
	Path string
	// state holds the marker of the first run and its process ID.
	state string
}

// newHangingPlugin writes the plugin as a script in a directory of t. Its
// first run records its process ID in state and sleeps; a later run fails
// at once. client-go runs a plugin without a deadline, so the probe can
// only leave it running: when the test ends, it kills the plugin, which
// ends the probe's abandoned requests.
//
// state must outlive the check that those requests ended (the test's
// goleak cleanup): a request that runs the plugin again on its way out
// then still finds the first run's marker and fails at once. With the
// marker in the script's own directory, removed first, such a run started
// a second plugin that slept for an hour (seen under make stress).
func newHangingPlugin(t *testing.T, state string) *hangingPlugin {
	t.Helper()
	p := &hangingPlugin{Path: filepath.Join(t.TempDir(), "plugin"), state: state}
	script := `#!/bin/sh
state='` + state + `'
if mkdir "$state/ran" 2>/dev/null; then
	echo $$ >"$state/pid.new" && mv "$state/pid.new" "$state/pid"
	exec sleep 3600
fi
exit 1
`
	require.NoError(t, os.WriteFile(p.Path, []byte(script), 0o755))
	t.Cleanup(func() {
		// The probe may have returned before client-go started it.
		var pid int
		require.Eventually(t, func() bool {
			var ok bool
			pid, ok = p.pid()
			return ok
		}, time.Minute, 10*time.Millisecond, "the plugin never ran")
		proc, err := os.FindProcess(pid)
		require.NoError(t, err)
		if err := proc.Kill(); !errors.Is(err, os.ErrProcessDone) {
			require.NoError(t, err)
		}
	})
	return p
}

// pid is the process ID of the plugin's first run, once it has started.
func (p *hangingPlugin) pid() (int, bool) {
	b, err := os.ReadFile(filepath.Join(p.state, "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// TestProbeCredentialPluginHangs: a kubeconfig's exec credential plugin
// that never answers holds up neither the probe's -timeout nor Ctrl-C
// (the cancelled context), and the error names the plugin.
func TestProbeCredentialPluginHangs(t *testing.T) {
	tests := []struct {
		name    string
		timeout string
		// interrupt cancels the probe's context, as the first Ctrl-C does,
		// once the plugin runs.
		interrupt bool
		// limit is how long the probe may take: with -timeout 1s, about
		// 2s; on a cancel, at once; and room for a loaded machine.
		limit time.Duration
		code  int
		want  func(plugin string) []string
	}{
		{
			name:    "timeout",
			timeout: "1s",
			limit:   15 * time.Second,
			code:    1,
			want: func(plugin string) []string {
				return []string{
					"kubewire probe: client-go got no credentials: the exec credential plugin " + plugin + " has not answered within the 1s -timeout; client-go gives it no deadline, and it is still running",
					"kubewire probe: kubewire got no credentials: the exec credential plugin " + plugin + " has not answered within the 1s -timeout;",
				}
			},
		},
		{
			name:      "interrupt",
			timeout:   "10m",
			interrupt: true,
			limit:     5 * time.Second,
			code:      exitInterrupted,
			want:      func(string) []string { return []string{"kubewire probe: interrupted"} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Removed last, after the goleak check (newHangingPlugin).
			state := t.TempDir()
			// Runs after the plugin is killed and the server closed.
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
			t.Setenv("KUBECONFIG", "")
			cluster := tlsCluster(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				assert.Fail(t, "a request without the plugin's credentials reached the server")
			}))
			plugin := newHangingPlugin(t, state)
			path := writeKubeconfigUser(t, cluster, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				APIVersion:      "client.authentication.k8s.io/v1",
				Command:         plugin.Path,
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args := []string{"probe", "-kubeconfig", path, "-gaps", "0s", "-timeout", tt.timeout}
			var out, errOut strings.Builder
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, &out, &errOut) }()
			start := time.Now()
			if tt.interrupt {
				require.Eventually(t, func() bool {
					_, ok := plugin.pid()
					return ok
				}, time.Minute, 10*time.Millisecond, "the plugin never ran")
				start = time.Now()
				cancel()
			}
			var code int
			select {
			case code = <-done:
			case <-time.After(tt.limit):
				t.Fatalf("kubewire %s: still running after %v", strings.Join(args, " "), tt.limit)
			}
			t.Logf("exited %d after %v", code, time.Since(start).Round(time.Millisecond))
			assert.Equal(t, tt.code, code, errOut.String())
			for _, want := range tt.want(plugin.Path) {
				assert.Contains(t, errOut.String(), want)
			}
		})
	}
}
