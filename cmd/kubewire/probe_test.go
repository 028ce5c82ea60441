package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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

// writeKubeconfig writes a kubeconfig for server, with token as the
// user's bearer token if it is set, and returns its path.
func writeKubeconfig(t *testing.T, server, token string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// TestProbeBounded: whatever the server does, the probe ends within its
// -timeout per step: (gaps + 2) × -timeout covers the gaps, which are at
// most -timeout here, and a warm-up and a list per gap that both probers
// run side by side.
func TestProbeBounded(t *testing.T) {
	tests := []struct {
		name   string
		server func(t *testing.T) string
		gaps   []string
		code   int
		want   []string
	}{
		{
			name:   "black hole",
			server: func(t *testing.T) string { return "http://" + newBlackHole(t).Addr },
			gaps:   []string{"0s", "1s"},
			code:   1,
			want: []string{
				"kubewire probe: client-go cannot reach the API server: no answer within the 1s -timeout:",
				"kubewire cannot reach the API server:",
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
			code: 0,
			want: []string{`"outcome": "error"`, "no answer within the 1s -timeout"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			path := writeKubeconfig(t, tt.server(t), "")
			const timeout = time.Second
			limit := time.Duration(len(tt.gaps)+2) * timeout
			args := []string{"probe", "-kubeconfig", path, "-gaps", strings.Join(tt.gaps, ","), "-timeout", timeout.String(), "-json"}
			var out, errOut strings.Builder
			done := make(chan int, 1)
			start := time.Now()
			go func() { done <- run(context.Background(), args, &out, &errOut) }()
			var code int
			select {
			case code = <-done:
			case <-time.After(limit):
				t.Fatalf("kubewire %s: still running after %v, (%d gaps + 2) × -timeout %v", strings.Join(args, " "), limit, len(tt.gaps), timeout)
			}
			t.Logf("exited %d after %v with -timeout %v", code, time.Since(start).Round(time.Millisecond), timeout)
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
	bin := filepath.Join(t.TempDir(), "kubewire")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bh := newBlackHole(t)
	path := writeKubeconfig(t, "http://"+bh.Addr, "")

	cmd := exec.Command(bin, "probe", "-kubeconfig", path, "-gaps", "0s", "-timeout", "10m")
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
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
}
