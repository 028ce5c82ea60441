package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestRequestIDReachesAuditID: a caller's X-Request-Id, if the gateway
// keeps it, is the answer's X-Request-Id and the Audit-ID of the API
// requests made for it; one it does not keep is replaced by a fresh one.
func TestRequestIDReachesAuditID(t *testing.T) {
	var audit string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		audit = r.Header.Get("Audit-ID")
	}))
	t.Cleanup(api.Close)
	client := &http.Client{Transport: auditIDs(http.DefaultTransport)}
	h := withRequestIDs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, api.URL, nil)
		if !assert.NoError(t, err) {
			return
		}
		resp, err := client.Do(req)
		if assert.NoError(t, err) {
			_ = resp.Body.Close()
		}
		assert.Empty(t, req.Header.Get("Audit-ID"), "the caller's request was modified")
	}))
	for _, tt := range []struct {
		give string
		keep bool
	}{
		{"op-000042", true},
		{"a.b_c:d/e-1", true},
		{strings.Repeat("x", maxRequestID), true},
		{"", false},
		{strings.Repeat("x", maxRequestID+1), false},
		{"has space", false},
		{"quote\"", false},
	} {
		audit = ""
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.give != "" {
			r.Header.Set("X-Request-Id", tt.give)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Header().Get("X-Request-Id")
		require.NotEmpty(t, got, "%q", tt.give)
		assert.Equal(t, got, audit, "%q: the Audit-ID is not the request ID", tt.give)
		if tt.keep {
			assert.Equal(t, tt.give, got)
		} else {
			assert.NotEqual(t, tt.give, got)
		}
	}
	t.Cleanup(client.CloseIdleConnections)
}

func TestAuditIDsContract(t *testing.T) {
	transporttest.TestMiddleware(t, auditIDs)
}

// TestAuditRequestIDIsOptIn: a caller's request ID reaches the audit log
// as an Audit-ID only under -audit-request-id: by default a caller does
// not choose the ID its calls are audited under.
func TestAuditRequestIDIsOptIn(t *testing.T) {
	var errOut strings.Builder
	c, ok := parseFlags(nil, &errOut)
	require.True(t, ok, errOut.String())
	assert.False(t, c.auditRequestID, "the default")
	c, ok = parseFlags([]string{"-audit-request-id"}, &errOut)
	require.True(t, ok, errOut.String())
	assert.True(t, c.auditRequestID)
}
