package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
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
	cfg := &rest.Config{Host: host}
	require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithTimeout(time.Second)))
	d, err := driver.New(cfg, "gw", []string{"team-a"})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), testr.New(t), nil, nil))
	t.Cleanup(srv.Close)
	return client{t: t, url: srv.URL}
}

const (
	createPath = "/v1/namespaces/team-a/sandboxes"
	template   = `{"spec":{"containers":[{"name":"agent","image":"busybox"}]}}`
)

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

// TestCreateBodyRefused: a body that is not exactly one JSON object of
// known fields is refused with 400 naming the problem, and nothing reaches
// the API server; a valid one does reach it.
func TestCreateBodyRefused(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"misspelled field", `{"name":"alpha","podTemplat":` + template + `}`, `unknown field "podTemplat"`},
		{"unknown field", `{"name":"alpha","podTemplate":` + template + `,"replicas":2}`, `unknown field "replicas"`},
		{"misspelled nested field", `{"name":"alpha","podTemplate":{"spec":{"containers":[{"name":"agent","image":"busybox","imagePullPolicyy":"Always"}]}}}`, `unknown field "podTemplate.spec.containers[0].imagePullPolicyy"`},
		{"field in the wrong case", `{"Name":"alpha","podTemplate":` + template + `}`, `unknown field "Name"`},
		{"duplicate field", `{"name":"alpha","name":"beta","podTemplate":` + template + `}`, `duplicate field "name"`},
		{"garbage after the object", `{"name":"alpha","podTemplate":` + template + `}garbage`, "after the JSON object"},
		{"second object", `{"name":"alpha","podTemplate":` + template + `} {"name":"beta"}`, "after the JSON object"},
		{"not an object", `null`, "not a JSON object"},
		{"array", `[{"name":"alpha","podTemplate":` + template + `}]`, "not a JSON object"},
		{"empty", ``, "request body is empty"},
		{"truncated", `{"name":"alpha","podTemplate":`, "unexpected EOF"},
		{"wrong type", `{"name":7,"podTemplate":` + template + `}`, "cannot unmarshal number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newCountingAPIServer(t)
			c := gatewayFor(t, api.URL)
			code, resp := c.do(http.MethodPost, createPath, tt.give)
			assert.Equal(t, http.StatusBadRequest, code, resp)
			assert.Equal(t, "invalid argument", resp["kind"])
			assert.Contains(t, resp["error"], tt.want)
			assert.Zero(t, api.n.Load(), "a refused body reached the API server")
		})
	}
	t.Run("valid", func(t *testing.T) {
		api := newCountingAPIServer(t)
		c := gatewayFor(t, api.URL)
		c.do(http.MethodPost, createPath, `{"name":"alpha","podTemplate":`+template+"}\n")
		assert.NotZero(t, api.n.Load(), "a valid create never reached the API server")
	})
}
