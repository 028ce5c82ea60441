package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/test/kubetest"
)

// TestAuthentication: with -authenticate (the default), the gateway lets
// in only callers whose bearer token the API server accepts, and lets
// them do only what RBAC allows them on the gateway's own API in that
// namespace: an allowed caller creates, reads, stops, starts and deletes;
// one without the Role gets 403 naming the verb and namespace, and its
// requests reach no Sandbox; no token, or one the API server does not
// accept, gets 401 with WWW-Authenticate. /metrics likewise. No token is
// in the log; the caller's user name is. Before the gateway had a gate,
// every one of these requests was served.
func TestAuthentication(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-auth-")
	ctx := context.Background()
	allowed := applyCaller(t, cs, []string{ns.Name}, "agent-team")
	denied := serviceAccountToken(t, cs, ns.Name, "stranger")
	g := startRun(t, "-kubeconfig", kubetest.WriteKubeconfig(t, cfg), "-namespace", ns.Name, "-gateway", "gw-auth", "-authenticate=true")
	url := "http://" + g.addr
	base := "/v1/namespaces/" + ns.Name + "/sandboxes"
	create := `{"name":"alpha","podTemplate":` + template + `}`

	ok := client{t: t, url: url, token: allowed}
	code, body := ok.do(http.MethodPost, base, create)
	require.Equal(t, http.StatusCreated, code, body)
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, base, http.StatusOK},
		{http.MethodGet, base + "/alpha", http.StatusOK},
		{http.MethodPost, base + "/alpha/stop", http.StatusOK},
		{http.MethodPost, base + "/alpha/start", http.StatusOK},
		{http.MethodGet, "/metrics", http.StatusOK},
	} {
		code, body := ok.do(tt.method, tt.path, "")
		assert.Equal(t, tt.want, code, "%s %s: %v", tt.method, tt.path, body)
	}
	sb, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/agents.x-k8s.io/v1beta1/namespaces", ns.Name, "sandboxes", "alpha").DoRaw(ctx)
	require.NoError(t, err)
	before := string(sb)

	stranger := client{t: t, url: url, token: denied}
	for _, tt := range []struct {
		method, path, body, verb string
	}{
		{http.MethodGet, base, "", "list"},
		{http.MethodPost, base, strings.Replace(create, "alpha", "beta", 1), "create"},
		{http.MethodGet, base + "/alpha", "", "get"},
		{http.MethodPost, base + "/alpha/stop", "", "stop"},
		{http.MethodPost, base + "/alpha/start", "", "start"},
		{http.MethodDelete, base + "/alpha", "", "delete"},
	} {
		code, body := stranger.do(tt.method, tt.path, tt.body)
		assert.Equal(t, http.StatusForbidden, code, "%s %s: %v", tt.method, tt.path, body)
		assert.Equal(t, "forbidden", body["kind"])
		assert.Equal(t, `user "system:serviceaccount:`+ns.Name+`:stranger" may not `+tt.verb+` sandboxes.gateway.kubewire.io in namespace "`+ns.Name+`"`, body["error"])
	}
	code, _ = stranger.do(http.MethodGet, "/metrics", "")
	assert.Equal(t, http.StatusForbidden, code, "/metrics")
	sb, err = cs.CoreV1().RESTClient().Get().AbsPath("/apis/agents.x-k8s.io/v1beta1/namespaces", ns.Name, "sandboxes", "alpha").DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, string(sb), "a refused stop, start or delete reached the sandbox")
	list, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/agents.x-k8s.io/v1beta1/namespaces", ns.Name, "sandboxes", "beta").DoRaw(ctx)
	assert.Error(t, err, "a refused create made a sandbox: %s", list)

	for _, token := range []string{"", "not-a-token", denied + "x"} {
		for _, path := range []string{base, "/metrics"} {
			resp := get(t, url+path, token)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "token %q, %s", token, path)
			assert.Equal(t, `Bearer realm="kubewire-gateway"`, resp.Header.Get("WWW-Authenticate"))
		}
	}

	code, body = ok.do(http.MethodDelete, base+"/alpha", "")
	assert.Equal(t, http.StatusNoContent, code, body)

	// The refusals are logged once answered.
	require.Eventually(t, func() bool {
		return strings.Contains(g.out.String(), "user=system:serviceaccount:"+ns.Name+":stranger")
	}, 10*time.Second, 5*time.Millisecond,
		"the caller's name in the refusal's log line:\n%s", &g.out)
	out := g.out.String()
	for _, token := range []string{allowed, denied} {
		assert.NotContains(t, out, token, "a token in the log")
		// A JWT's signature alone identifies it.
		assert.NotContains(t, out, token[strings.LastIndex(token, ".")+1:], "a token's signature in the log")
	}
}

// get sends GET url with token, if any, and returns the closed response.
func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

// reviewCounter counts the TokenReviews and SubjectAccessReviews a config's
// clients send.
type reviewCounter struct{ n atomic.Int64 }

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") || strings.HasSuffix(r.URL.Path, "/subjectaccessreviews") {
			c.n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// gatedServer serves the gateway for ns with a gate that keeps answers
// for ttl and whose reviews reviews counts, and returns its URL.
func gatedServer(t testing.TB, cfg *rest.Config, ns string, ttl time.Duration, reviews *reviewCounter) string {
	d, err := driver.New(cfg, "gw-warm", []string{ns})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	rc := rest.CopyConfig(cfg)
	rc.Wrap(reviews.wrap)
	g, err := newGate(rc, nil, ttl, logr.Discard())
	require.NoError(t, err)
	srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), logr.Discard(), g, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestWarmCallerCostsNoReview: a caller's first request costs a
// TokenReview and a SubjectAccessReview; its next requests of the same
// verb in the same namespace, within the caches' 10s, cost none.
func TestWarmCallerCostsNoReview(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-warm-")
	token := applyCaller(t, cs, []string{ns.Name}, "agent-team")
	var reviews reviewCounter
	// A cache that outlives the test, which a loaded machine may make
	// slow: a second review is then the gate's doing, never the clock's.
	c := client{t: t, url: gatedServer(t, cfg, ns.Name, time.Hour, &reviews), token: token}
	path := "/v1/namespaces/" + ns.Name + "/sandboxes"
	code, body := c.do(http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, code, body)
	assert.EqualValues(t, 2, reviews.n.Load(), "the first request: one TokenReview, one SubjectAccessReview")
	for range 20 {
		code, body := c.do(http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, code, body)
	}
	assert.EqualValues(t, 2, reviews.n.Load(), "20 warm requests cost no review")
}

// TestTokenAudience: with -token-audiences, only a token issued for one of
// them is accepted; a token for the API server, which a caller could
// replay there, is not.
func TestTokenAudience(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-aud-")
	ctx := context.Background()
	apiServers := applyCaller(t, cs, []string{ns.Name}, "agent-team")
	tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, "agent-team", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{"kubewire-gateway"}, ExpirationSeconds: ptr.To[int64](3600),
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	g := startRun(t, "-kubeconfig", kubetest.WriteKubeconfig(t, cfg), "-namespace", ns.Name, "-gateway", "gw-aud",
		"-authenticate=true", "-token-audiences", "kubewire-gateway")
	path := "http://" + g.addr + "/v1/namespaces/" + ns.Name + "/sandboxes"
	assert.Equal(t, http.StatusOK, get(t, path, tr.Status.Token).StatusCode, "a token for the gateway")
	assert.Equal(t, http.StatusUnauthorized, get(t, path, apiServers).StatusCode, "a token for the API server")
}

// TestUnreachableReviewIs503: when the API server cannot answer a
// TokenReview, the caller is told 503, not 401: its token was not
// rejected, and a client told 401 would blame it.
func TestUnreachableReviewIs503(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	g, err := newGate(&rest.Config{Host: "http://" + addr}, nil, cacheTTL, logr.Discard())
	require.NoError(t, err)
	srv := httptest.NewServer(g.authenticate(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the request went past the gate")
	})))
	t.Cleanup(srv.Close)
	resp := get(t, srv.URL+"/v1/namespaces/ns/sandboxes", "some-token")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("WWW-Authenticate"))
}
