package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// TestPathCheckedBeforeReview: a path whose namespace or sandbox name is
// not a DNS label is answered 400 naming the field and the value (cut to
// its first 64 bytes), before any review: a namespace of 900 KB once cost
// an uncached TokenReview and SubjectAccessReview of that size each time.
func TestPathCheckedBeforeReview(t *testing.T) {
	var reviews reviewCounter
	rc := &rest.Config{Host: "http://" + unreachable(t)}
	rc.Wrap(reviews.wrap)
	g, err := newGate(rc, nil, cacheTTL, logr.Discard())
	require.NoError(t, err)
	srv := httptest.NewServer(newHandler(nil, prometheus.NewRegistry(), logr.Discard(), g, nil))
	t.Cleanup(srv.Close)
	huge := strings.Repeat("a", 900<<10)
	for _, tt := range []struct {
		path, want string
	}{
		{"/v1/namespaces/Team_A/sandboxes", `namespace "Team_A" in the path is not a DNS label`},
		{"/v1/namespaces/" + huge + "/sandboxes", fmt.Sprintf(`namespace "%s"... (%d bytes) in the path is not a DNS label`, huge[:64], len(huge))},
		{"/v1/namespaces/team-a/sandboxes/a.b", `sandbox name "a.b" in the path is not a DNS label`},
		{"/v1/namespaces/team-a/sandboxes/a.b/stop", `sandbox name "a.b" in the path is not a DNS label`},
		{"/v1/namespaces/a%2Fb/sandboxes", `namespace "a%2Fb" in the path is not a DNS label`},
	} {
		t.Run(tt.path[:min(len(tt.path), 48)], func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer some-token")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b[:min(len(b), 200)]))
			assert.Less(t, len(b), 1024, "the answer's size")
			var body map[string]string
			require.NoError(t, json.Unmarshal(b, &body))
			assert.Equal(t, "invalid argument", body["kind"])
			assert.True(t, strings.HasPrefix(body["error"], tt.want), "%q", body["error"])
		})
	}
	assert.Zero(t, reviews.n.Load(), "reviews sent for impossible paths")
}

// TestHealthChecks: /healthz and /livez answer anyone 200 "ok", /readyz
// 503 until the driver's caches have synced, then 200; none needs a token,
// says more than that, or lets a request of another method through the
// gate. Before, all three answered 401.
func TestHealthChecks(t *testing.T) {
	g, err := newGate(&rest.Config{Host: "http://" + unreachable(t)}, nil, cacheTTL, logr.Discard())
	require.NoError(t, err)
	var synced atomic.Bool
	srv := httptest.NewServer(newHandler(nil, prometheus.NewRegistry(), logr.Discard(), g, synced.Load))
	t.Cleanup(srv.Close)
	check := func(method, path string) (int, string) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/livez"} {
		code, body := check(http.MethodGet, path)
		assert.Equal(t, http.StatusOK, code, path)
		assert.Equal(t, "ok\n", body, path)
	}
	code, body := check(http.MethodGet, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "/readyz before the caches synced")
	assert.Equal(t, "not ready\n", body)
	synced.Store(true)
	code, body = check(http.MethodGet, "/readyz")
	assert.Equal(t, http.StatusOK, code, "/readyz once the caches synced")
	assert.Equal(t, "ok\n", body)
	code, _ = check(http.MethodPost, "/healthz")
	assert.Equal(t, http.StatusUnauthorized, code, "POST /healthz goes through the gate")
}

// unreachable returns a loopback address nothing listens on.
func unreachable(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
