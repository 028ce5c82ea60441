package soak

import (
	"bufio"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/test/kubetest"
)

// binary is the gateway, built once per test binary into dir, which
// [Cleanup] removes.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Cleanup removes what the soak built; TestMain calls it.
func Cleanup() {
	if binary.dir != "" {
		_ = os.RemoveAll(binary.dir)
	}
}

// gatewayBinary builds examples/gateway once per test binary
// (kubetest.BuildCommand).
func gatewayBinary(tb testing.TB) string {
	tb.Helper()
	binary.once.Do(func() {
		src, err := filepath.Abs("../../../examples/gateway")
		if err != nil {
			binary.err = err
			return
		}
		if binary.dir, binary.err = os.MkdirTemp("", "kubewire-soak-"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "gateway")
		binary.err = kubetest.BuildCommand(src, binary.path)
	})
	if binary.err != nil {
		tb.Fatal(binary.err)
	}
	return binary.path
}

// servingLine is the gateway's log line with the address it serves on.
var servingLine = regexp.MustCompile(`msg=serving addr=(\S+)`)

// Process is the [Gateway] of examples/gateway run as a process, as a
// user runs it: loopback, no authentication, its log in dir/gateway.log,
// with args after the soak's own flags. Its handler is a reverse proxy to
// the process, returned once /readyz answers 200; stop sends SIGTERM and
// fails the test unless the process exits 0.
func Process(args ...string) Gateway {
	return func(t testing.TB, cfg *rest.Config, namespace, dir string) (http.Handler, func()) {
		t.Helper()
		log, err := os.Create(filepath.Join(dir, "gateway.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(gatewayBinary(t), append([]string{"-kubeconfig", kubetest.WriteKubeconfig(t, cfg),
			"-listen", "127.0.0.1:0", "-authenticate=false", "-audit-request-id", "-namespace", namespace, "-gateway", "soak"}, args...)...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				_, _ = fmt.Fprintln(log, sc.Text())
				if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
					select { // the first address; never block the log
					case addr <- m[1]:
					default:
					}
				}
			}
			_, _ = io.Copy(log, stderr)
			exited <- cmd.Wait()
			_ = log.Close()
		}()
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("the gateway did not exit cleanly: %v (its log: %s)", err, log.Name())
				}
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Errorf("the gateway did not exit a minute after SIGTERM (its log: %s)", log.Name())
				<-exited
			}
		}
		t.Cleanup(stop)
		var u *url.URL
		select {
		case a := <-addr:
			u = &url.URL{Scheme: "http", Host: a}
		case err := <-exited:
			stopped = true
			t.Fatalf("the gateway exited before serving: %v (its log: %s)", err, log.Name())
		case <-time.After(time.Minute):
			t.Fatalf("the gateway did not serve within a minute (its log: %s)", log.Name())
		}
		tr := &http.Transport{}
		awaitReady(t, &http.Client{Transport: tr}, u.String()+"/readyz")
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = tr
		return rp, func() {
			stop()
			tr.CloseIdleConnections()
		}
	}
}

func awaitReady(t testing.TB, c *http.Client, readyz string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get(readyz)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not ready within a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
