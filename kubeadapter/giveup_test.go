package kubeadapter_test

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
)

// TestGiveUpIsTheLastCall: a call middleware that fails a request over to
// a second server after the stack gave up on the first hands back the
// second call's error. That call failed on its only attempt (a certificate
// the client does not trust), which the stack did not retry, so the error
// client-go gets is no [kubeadapter.Error]: the give-up of the first call
// is not the story of the second. Before the fix the stack kept the first
// call's retry error and wrapped the second's error in it.
func TestGiveUpIsTheLastCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{}`)
	}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake the client refuses
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)

	var first error
	failover := func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil {
				return resp, nil
			}
			first = err
			again := req.Clone(req.Context())
			again.URL.Scheme, again.URL.Host = "https", untrusted.Listener.Addr().String()
			return next.RoundTrip(again)
		})
	}
	cfg := &rest.Config{Host: "http://" + refused}
	require.NoError(t, kubeadapter.Apply(cfg,
		kubeadapter.WithRetryOptions(retry.WithBackoff(func(int) (d time.Duration) { return d })),
		kubeadapter.WithStackOptions(stack.WithCallMiddleware(failover))))
	client, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)

	_, err = client.Get("http://" + refused + "/api/v1/namespaces/ns/configmaps/cm")
	require.Error(t, err)
	var re *retry.Error
	require.ErrorAs(t, first, &re, "the first call: the stack gave up")
	assert.Equal(t, retry.DefaultMaxAttempts, re.Attempts)
	var ke *kubeadapter.Error
	assert.False(t, errors.As(err, &ke), "the second call's error came back as the first call's give-up: %v", err)
	assert.ErrorContains(t, err, "certificate")
}
