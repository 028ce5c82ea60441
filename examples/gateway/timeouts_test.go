package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/test/kubetest"
)

// TestRunClosesStalledConnections: a keep-alive connection left idle is
// closed after -idle-timeout, and one whose request body stops coming
// after -read-timeout, so that neither holds a goroutine and a file
// descriptor of the gateway for good. The timeouts are 200ms; the bound
// the test allows, 10s, is for a loaded machine.
func TestRunClosesStalledConnections(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-timeouts-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	kubeconfig := kubetest.WriteKubeconfig(t, cfg)
	tests := []struct {
		name string
		flag string
		give string // what the client sends, and then nothing
		want string // how the answer starts
	}{
		{
			name: "idle keep-alive", flag: "-idle-timeout",
			give: "GET /metrics HTTP/1.1\r\nHost: gateway\r\n\r\n",
			want: "HTTP/1.1 200 OK\r\n",
		},
		{
			name: "1 of 1000 body bytes", flag: "-read-timeout",
			give: "POST /v1/namespaces/" + ns.Name + "/sandboxes HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
			want: "HTTP/1.1 408 Request Timeout\r\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startRun(t, "-kubeconfig", kubeconfig, "-namespace", ns.Name, "-gateway", "gw-timeouts", tt.flag, "200ms")
			conn, err := net.Dial("tcp", g.addr)
			require.NoError(t, err)
			defer conn.Close()
			_, err = io.WriteString(conn, tt.give)
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			// The gateway's answer, then the end of the stream.
			b, err := io.ReadAll(conn)
			require.NoError(t, err, "the gateway did not close the connection within 10s of a %s of 200ms", tt.flag)
			answer := string(b)
			assert.True(t, strings.HasPrefix(answer, tt.want), answer)
			// The connection's addresses are the gateway's business.
			assert.NotContains(t, answer, "127.0.0.1")
		})
	}
}

// TestRunRequestTimeout: a request whose API call does not come back
// within -request-timeout is answered 503, kind unavailable, before
// -write-timeout would cut its connection.
func TestRunRequestTimeout(t *testing.T) {
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-timeouts-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	p := newHoldingProxy(t, cfg, func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns.Name+"/sandboxes/beta")
	})
	g := startRun(t, "-kubeconfig", kubetest.WriteKubeconfig(t, &rest.Config{Host: p.URL}), "-namespace", ns.Name, "-gateway", "gw-timeouts",
		"-read-timeout", "5s", "-request-timeout", "500ms", "-write-timeout", "10s")

	resp, err := http.Get("http://" + g.addr + "/v1/namespaces/" + ns.Name + "/sandboxes/beta")
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct{ Kind, Error string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, got)
	assert.Equal(t, "unavailable", got.Kind)
	assert.Equal(t, "driver: get sandbox "+ns.Name+"/beta: unavailable", got.Error)
}

// TestFailLogsWhatTheClientGot: an error answer that cannot be written
// (here its write deadline has passed, as when -write-timeout runs out
// before -read-timeout) reaches no one, and the log line says so. Before
// the fix the line was written before the answer and said status=408
// while the client got a closed connection.
func TestFailLogsWhatTheClientGot(t *testing.T) {
	for _, tt := range []struct {
		name     string
		deadline time.Duration // the write deadline, from the answer
		answered bool
	}{
		{"written", time.Minute, true},
		{"write deadline passed", -time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logged syncBuffer
			log := logr.FromSlogHandler(slog.NewTextHandler(&logged, nil))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				assert.NoError(t, http.NewResponseController(w).SetWriteDeadline(time.Now().Add(tt.deadline)))
				fail(w, r, log, &driver.Error{Op: "create", Namespace: "ns", Kind: driver.KindInvalidArgument,
					Err: &bodyError{os.ErrDeadlineExceeded}})
			}))
			t.Cleanup(srv.Close)
			resp, err := srv.Client().Post(srv.URL+"/v1/namespaces/ns/sandboxes", "application/json", strings.NewReader("{}"))
			if tt.answered {
				require.NoError(t, err)
				var body map[string]string
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
				require.NoError(t, resp.Body.Close())
				assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
				assert.Equal(t, resp.Header.Get("X-Request-Id"), body["id"])
				line := logLine(t, &logged, body["id"])
				assert.NotContains(t, line, "answered=false")
				assert.Contains(t, line, "status=408")
			} else {
				// The handler logs before it returns, and the connection
				// is closed after.
				require.Error(t, err, "the client got no answer")
				assert.Contains(t, logged.String(), "answered=false")
				assert.Contains(t, logged.String(), "writeErr=")
				assert.Contains(t, logged.String(), "status=408")
			}
		})
	}
}
