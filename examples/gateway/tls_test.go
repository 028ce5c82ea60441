package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/kubetest"
)

// selfSigned writes a self-signed serving certificate for 127.0.0.1 with
// serial to cert and key (through a rename, as a secret volume's update
// is atomic) and returns it.
func selfSigned(t *testing.T, certPath, keyPath string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	for _, f := range []struct {
		path string
		pem  *pem.Block
	}{{keyPath, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}}, {certPath, &pem.Block{Type: "CERTIFICATE", Bytes: der}}} {
		tmp := f.path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, pem.EncodeToMemory(f.pem), 0o600))
		require.NoError(t, os.Rename(tmp, f.path))
	}
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

// servedSerial returns the serial of the certificate the server at addr
// presents on a new connection.
func servedSerial(addr string) (int64, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestTLSRotation: with -tls-cert-file and -tls-key-file the gateway
// serves HTTPS to authenticated callers, and a certificate rotated on disk
// is served to new connections without a restart.
func TestTLSRotation(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-tls-")
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := selfSigned(t, certPath, keyPath, 1)
	token := applyCaller(t, cs, []string{ns.Name}, "agent-team")
	g := startRun(t, "-kubeconfig", kubetest.WriteKubeconfig(t, cfg), "-namespace", ns.Name, "-gateway", "gw-tls",
		"-tls-cert-file", certPath, "-tls-key-file", keyPath, "-authenticate=true")
	pool := x509.NewCertPool()
	pool.AddCert(first)
	c := client{t: t, url: "https://" + g.addr, token: token, hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	code, body := c.do(http.MethodGet, "/v1/namespaces/"+ns.Name+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code, body, "HTTPS with the first certificate")
	c.hc.CloseIdleConnections()

	selfSigned(t, certPath, keyPath, 2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		serial, err := servedSerial(g.addr)
		require.NoError(c, err)
		assert.EqualValues(c, 2, serial)
	}, 30*time.Second, 50*time.Millisecond, "the rotated certificate is never served")
	resp, err := http.Get("http://" + g.addr + "/metrics")
	if err == nil {
		_ = resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP is not served")
	}
}
