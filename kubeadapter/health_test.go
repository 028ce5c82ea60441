package kubeadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewire/kubewire/internal/faultproxy"
	"github.com/kubewire/kubewire/kubeadapter"
)

// TestHTTP2Health: with per-client health-check timings, a connection whose
// peer went silent is found dead and replaced; with client-go's defaults
// (30s) the same connection is still in the pool after the same wait.
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
			cfg, p := proxied(t, env.Config(t))
			var seen attempts
			require.NoError(t, kubeadapter.Apply(cfg, append(tt.opts, kubeadapter.WithObserver(seen.observe))...))
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			ctx := context.Background()
			_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, "HTTP/2.0", seen.last().Conn.Proto)

			p.SetFault(faultproxy.BlackHole)
			time.Sleep(600 * time.Millisecond)
			p.SetFault(faultproxy.None)
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
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithHTTP2Health(5*time.Second, 2*time.Second), kubeadapter.WithObserver(seen.observe)))
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
