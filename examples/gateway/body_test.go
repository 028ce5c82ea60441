package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/kubeadapter"
)

// countingAPIServer stands in for the API server where a test needs to
// know only whether a request reached it: it counts the requests and
// answers each 404.
type countingAPIServer struct {
	*httptest.Server
	n atomic.Int64
}

func newCountingAPIServer(t *testing.T) *countingAPIServer {
	s := &countingAPIServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// gatewayFor serves the gateway, for namespace team-a, in front of the API
// server at host.
func gatewayFor(t *testing.T, host string) client {
	d, err := driver.New(&rest.Config{Host: host}, "gw", []string{"team-a"}, driver.WithAdapterOptions(kubeadapter.WithTimeout(time.Second)))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	return client{t, srv.URL}
}

const createPath = "/v1/namespaces/team-a/sandboxes"

// TestCreateBodyTooLarge: a body over the limit is refused with 413 naming
// the limit, and nothing reaches the API server.
func TestCreateBodyTooLarge(t *testing.T) {
	api := newCountingAPIServer(t)
	c := gatewayFor(t, api.URL)
	// A valid create whose only fault is its size, a few bytes over.
	pad := strings.Repeat("x", maxBody)
	body := `{"name":"alpha","podTemplate":{"metadata":{"annotations":{"pad":"` + pad + `"}},"spec":{"containers":[{"name":"agent","image":"busybox"}]}}}`
	code, resp := c.do(http.MethodPost, createPath, body)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, resp)
	assert.Equal(t, "invalid argument", resp["kind"])
	assert.Contains(t, resp["error"], "request body is larger than 1048576 bytes (1 MiB)")
	assert.Zero(t, api.n.Load(), "a refused body reached the API server")
}
