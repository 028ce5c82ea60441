package kubeadapter_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/test/kubeadapter/internal/conntrack"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestHTTP2Health: with per-client health-check timings, a connection whose
// peer went silent is found dead and replaced; with client-go's defaults
// (30s) the same connection is still in the pool after the same wait. The
// proxy holds the bytes of both directions and delivers them afterwards, so
// only a health check can end the connection.
func TestHTTP2Health(t *testing.T) {
	tests := []struct {
		name       string
		opts       []kubeadapter.Option
		wantReused bool
	}{
		{"WithHTTP2Health(100ms, 100ms)", []kubeadapter.Option{kubeadapter.WithHTTP2Health(100*time.Millisecond, 100*time.Millisecond)}, false},
		{"client-go defaults", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, p := kubetest.Proxied(t, env.Config(t))
			var conns conntrack.Conns
			cfg.Dial = conns.Dial(cfg.Dial)
			var seen attempts
			require.NoError(t, kubeadapter.Apply(cfg, append(tt.opts, kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: seen.observe}))...))
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			ctx := context.Background()
			_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, "HTTP/2.0", seen.last().Conn.Proto)
			require.Equal(t, 1, conns.Dialed())

			p.SetFault(transporttest.Hold)
			conns.CheckHealthClose(t, 0, !tt.wantReused)
			p.SetFault(transporttest.NoFault)
			_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tt.wantReused, seen.last().Conn.Reused)
		})
	}
}

// TestExecPluginKeepsWorking: an exec credential plugin that supplies the
// client certificate still authenticates when the client has its own
// HTTP/2 settings, and the TLS settings (CA) of the config survive.
func TestExecPluginKeepsWorking(t *testing.T) {
	admin := env.Config(t)
	cred, err := json.Marshal(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1",
		"kind":       "ExecCredential",
		"status": map[string]string{
			"clientCertificateData": string(admin.CertData),
			"clientKeyData":         string(admin.KeyData),
		},
	})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cred.json"), cred, 0o600))
	plugin := filepath.Join(dir, "plugin.sh")
	require.NoError(t, os.WriteFile(plugin, []byte(fmt.Sprintf("#!/bin/sh\ncat %q\n", filepath.Join(dir, "cred.json"))), 0o700))

	cfg := rest.CopyConfig(admin)
	cfg.CertData, cfg.KeyData = nil, nil
	cfg.ExecProvider = &clientcmdapi.ExecConfig{
		APIVersion:      "client.authentication.k8s.io/v1",
		Command:         plugin,
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
	var seen attempts
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithHTTP2Health(5*time.Second, 2*time.Second), kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: seen.observe})))
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "exec-"}}, metav1.CreateOptions{})
	require.NoError(t, err, "the exec plugin's client certificate authenticated")
	require.NoError(t, cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}))
	assert.Equal(t, "HTTP/2.0", seen.last().Conn.Proto)

	// Without credentials the API server says who we are not.
	anon := rest.CopyConfig(cfg)
	anon.ExecProvider = nil
	require.NoError(t, kubeadapter.Apply(anon))
	cs, err = kubernetes.NewForConfig(anon)
	require.NoError(t, err)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "anon-"}}, metav1.CreateOptions{})
	require.Error(t, err, "the plugin, not something else, supplied the credentials")
}

// TestHTTP2HealthRefuses: when the health check cannot apply, Apply says
// why and leaves the config unchanged, instead of doing nothing.
func TestHTTP2HealthRefuses(t *testing.T) {
	h1Only := &http.Transport{Protocols: new(http.Protocols)}
	h1Only.Protocols.SetHTTP1(true)
	h2cOnly := &http.Transport{Protocols: new(http.Protocols)}
	h2cOnly.Protocols.SetHTTP1(true)
	h2cOnly.Protocols.SetUnencryptedHTTP2(true)
	tests := []struct {
		name string
		give *rest.Config
		env  string
		want string
	}{
		{
			name: "DISABLE_HTTP2",
			give: &rest.Config{Host: "https://127.0.0.1:6443"},
			env:  "1",
			want: "HTTP/2 is off: DISABLE_HTTP2 is set",
		},
		{
			name: "NextProtos without h2",
			give: &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{NextProtos: []string{"http/1.1"}}},
			want: `HTTP/2 is off: rest.Config.TLSClientConfig.NextProtos is ["http/1.1"]`,
		},
		{
			name: "transport without HTTP/2",
			give: &rest.Config{Host: "https://127.0.0.1:6443", Transport: h1Only},
			want: "rest.Config.Transport has HTTP/2 off",
		},
		{
			name: "plain http, as kubectl proxy serves",
			give: &rest.Config{Host: "http://user:s3cr3tpass@127.0.0.1:8001"},
			want: "HTTP/2 is off: the server http://user:xxxxx@127.0.0.1:8001 is plain http, which client-go speaks in HTTP/1.1",
		},
		{
			name: "a host without a scheme and no TLS settings",
			give: &rest.Config{Host: "127.0.0.1:8001"},
			want: "HTTP/2 is off: the server http://127.0.0.1:8001 is plain http",
		},
		{
			name: "plain http with an HTTP/2 transport",
			give: &rest.Config{Host: "http://127.0.0.1:8001", Transport: &http.Transport{ForceAttemptHTTP2: true}},
			want: "HTTP/2 is off: the server http://127.0.0.1:8001 is plain http",
		},
		{
			name: "https with a transport whose HTTP/2 is only unencrypted",
			give: &rest.Config{Host: "https://127.0.0.1:6443", Transport: h2cOnly},
			want: "rest.Config.Transport has HTTP/2 off",
		},
		{
			name: "transport of another type",
			give: &rest.Config{Host: "https://127.0.0.1:6443", Transport: roundTripperFunc(nil)},
			want: "it needs client-go's transport or an *http.Transport, got rest.Config.Transport of type kubeadapter_test.roundTripperFunc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DISABLE_HTTP2", tt.env)
			cfg := rest.CopyConfig(tt.give)
			cfg.Timeout = 5 * time.Second
			err := kubeadapter.Apply(cfg, kubeadapter.WithHTTP2Health(time.Second, time.Second))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "kubeadapter: WithHTTP2Health cannot apply: "+tt.want)
			assert.NotContains(t, err.Error(), "s3cr3tpass")
			assert.Nil(t, cfg.WrapTransport, "cfg changed on error")
			assert.Equal(t, 5*time.Second, cfg.Timeout)

			require.NoError(t, kubeadapter.Apply(cfg), "without WithHTTP2Health the same config is fine")
		})
	}

	// net/http speaks HTTP/2 over plain http when the transport asks.
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	assert.NoError(t, kubeadapter.Apply(&rest.Config{Host: "http://127.0.0.1:8001", Transport: h2c}, kubeadapter.WithHTTP2Health(time.Second, time.Second)))
}

// TestIdleConnTimeoutRefuses: WithIdleConnTimeout needs a transport it may
// clone, HTTP/2 or not.
func TestIdleConnTimeoutRefuses(t *testing.T) {
	h1Only := &http.Transport{Protocols: new(http.Protocols)}
	h1Only.Protocols.SetHTTP1(true)
	for _, tt := range []struct {
		name string
		give *rest.Config
		want string
	}{
		{
			name: "transport of another type",
			give: &rest.Config{Host: "https://127.0.0.1:6443", Transport: roundTripperFunc(nil)},
			want: "kubeadapter: WithIdleConnTimeout cannot apply: it needs client-go's transport or an *http.Transport, got rest.Config.Transport of type kubeadapter_test.roundTripperFunc",
		},
		{
			name: "both options, transport without HTTP/2",
			give: &rest.Config{Host: "https://127.0.0.1:6443", Transport: h1Only},
			want: "kubeadapter: WithHTTP2Health and WithIdleConnTimeout cannot apply: rest.Config.Transport has HTTP/2 off",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rest.CopyConfig(tt.give)
			opts := []kubeadapter.Option{kubeadapter.WithIdleConnTimeout(time.Second)}
			if strings.HasPrefix(tt.name, "both") {
				opts = append(opts, kubeadapter.WithHTTP2Health(time.Second, time.Second))
			}
			err := kubeadapter.Apply(cfg, opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Nil(t, cfg.WrapTransport, "cfg changed on error")
		})
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", Transport: h1Only}
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithIdleConnTimeout(time.Second)), "HTTP/1.1 only is fine for the idle timeout")
}

// TestIdleConnTimeout: a client with WithIdleConnTimeout(300ms) does not
// reuse a connection idle for 500ms; by default it does (client-go's 90s).
// Over HTTP/2, as the API server speaks.
func TestIdleConnTimeout(t *testing.T) {
	for _, tt := range []struct {
		name       string
		opts       []kubeadapter.Option
		wantReused bool
	}{
		{"300ms", []kubeadapter.Option{kubeadapter.WithIdleConnTimeout(300 * time.Millisecond)}, false},
		{"300ms with health check", []kubeadapter.Option{kubeadapter.WithIdleConnTimeout(300 * time.Millisecond), kubeadapter.WithHTTP2Health(5*time.Second, 2*time.Second)}, false},
		{"default", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := kubetest.Proxied(t, env.Config(t))
			var seen attempts
			require.NoError(t, kubeadapter.Apply(cfg, append(tt.opts, kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: seen.observe}))...))
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			ctx := context.Background()
			for i := range 2 {
				if i == 1 {
					time.Sleep(500 * time.Millisecond)
				}
				_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
				require.NoError(t, err)
			}
			last := seen.last()
			assert.Equal(t, "HTTP/2.0", last.Conn.Proto)
			assert.Equal(t, tt.wantReused, last.Conn.Reused, "second GET after 500ms idle: %v", last.Conn)
		})
	}
}

// caFileServer is a TLS server and a file holding its CA.
func caFileServer(t *testing.T) (*httptest.Server, string) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv, caFile
}

// reloadsCA asks client-go itself, without kubeadapter, whether it reloads
// a CA file. From v0.36 on (feature ClientsAllowCARotation, on by default)
// the base transport it hands a wrapper of a config with a CA file has one
// layer more than for the same CA given as data: a holder that swaps
// transports. v0.34 and v0.35 read the file once.
func reloadsCA(t *testing.T, caFile string) bool {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	require.NoError(t, err)
	depth := func(tc rest.TLSClientConfig) (n int, base http.RoundTripper) {
		cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: tc}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			base = rt
			return rt
		})
		_, err := rest.TransportFor(cfg)
		require.NoError(t, err)
		for rt := base; rt != nil; n++ {
			w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
			if !ok {
				break
			}
			rt = w.WrappedRoundTripper()
		}
		return n, base
	}
	fromFile, base := depth(rest.TLSClientConfig{CAFile: caFile})
	fromData, _ := depth(rest.TLSClientConfig{CAData: ca})
	t.Logf("client-go reloads CA files: %v (base transport %T, %d layers; %d with CAData)", fromFile > fromData, base, fromFile, fromData)
	return fromFile > fromData
}

// TestCAFileByRelease: with a CA file, the options that clone client-go's
// transport refuse where client-go reloads the file through a transport it
// swaps, which a clone would not follow, and apply where it reads the file
// once.
func TestCAFileByRelease(t *testing.T) {
	_, caFile := caFileServer(t)
	reloads := reloadsCA(t, caFile)
	for _, tt := range []struct {
		name string
		give kubeadapter.Option
	}{
		{name: "WithHTTP2Health", give: kubeadapter.WithHTTP2Health(time.Second, time.Second)},
		{name: "WithIdleConnTimeout", give: kubeadapter.WithIdleConnTimeout(time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}
			err := kubeadapter.Apply(cfg, tt.give)
			if !reloads {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "kubeadapter: "+tt.name+" cannot apply: client-go (v0.36 and later, feature ClientsAllowCARotation) reloads the CA file "+caFile+
				" through a transport it swaps when the file changes, which a clone would not follow; give the CA as CAData")
			assert.Nil(t, cfg.WrapTransport, "cfg changed on error")
		})
	}
}

// TestHTTP2HealthWarnsOnce: Wrap, which cannot return an error, logs
// once when the base transport is one it must not clone (client-go's
// CA-reloading holder, for a config with a CA file, from v0.36 on) and
// leaves it in place; where client-go reads the CA file once, it clones
// and logs nothing.
func TestHTTP2HealthWarnsOnce(t *testing.T) {
	srv, caFile := caFileServer(t)
	reloads := reloadsCA(t, caFile)

	var log logLines
	wrap := kubeadapter.Wrap(kubeadapter.WithHTTP2Health(time.Second, time.Second), kubeadapter.WithLogger(log.logger()))
	for range 2 {
		cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}
		cfg.Wrap(wrap)
		c, err := rest.HTTPClientFor(cfg)
		require.NoError(t, err)
		resp, err := c.Get(srv.URL)
		require.NoError(t, err, "the request still goes through client-go's transport")
		require.NoError(t, resp.Body.Close())
		// client-go's outer wrappers do not forward http.Client's.
		utilnet.CloseIdleConnectionsFor(c.Transport)
	}
	logged := log.lines()
	if !reloads {
		assert.Empty(t, logged)
		return
	}
	require.Len(t, logged, 1)
	assert.Contains(t, logged[0], "WithHTTP2Health does not apply")
	assert.Contains(t, logged[0], "atomicTransportHolder")
}

// TestHTTP2HealthClones: over a transport configured the way client-go
// configures it, the client gets a clone with its own timings, with
// HTTP/2 on and the original's TLS config; the original is not touched.
func TestHTTP2HealthClones(t *testing.T) {
	tlsConfig := &tls.Config{ServerName: "api.example"}
	base := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsConfig})
	var got *http.Transport
	probe := kubeadapter.Wrap(kubeadapter.WithHTTP2Health(2*time.Second, 3*time.Second))(base)
	for rt := http.RoundTripper(probe); rt != nil; {
		if t, ok := rt.(*http.Transport); ok {
			got = t
			break
		}
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		require.True(t, ok, "%T hides what is below it", rt)
		rt = w.WrappedRoundTripper()
	}
	require.NotNil(t, got)
	require.NotSame(t, base, got, "a clone, not client-go's shared transport")
	require.NotNil(t, got.HTTP2)
	assert.Equal(t, 2*time.Second, got.HTTP2.SendPingTimeout)
	assert.Equal(t, 3*time.Second, got.HTTP2.PingTimeout)
	assert.True(t, got.Protocols.HTTP2())
	assert.Equal(t, "api.example", got.TLSClientConfig.ServerName)
	if base.HTTP2 != nil {
		// Go 1.27's Clone sets up the original's HTTP/2, as its first
		// request would: an empty HTTP2Config, never the clone's timings.
		assert.Zero(t, base.HTTP2.SendPingTimeout, "the original keeps its timings")
	}
}
