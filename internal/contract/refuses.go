package contract

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport"
)

// Refuses checks a middleware built with invalid options, as every
// package's options report bad input: a POST through it with ctx fails
// with exactly the error want and no response, its body is closed, and
// nothing reaches the server.
func Refuses(t *testing.T, ctx context.Context, mw transport.Middleware, want string) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	body := NewBody("{}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	resp, err := mw(newBase(t)).RoundTrip(req)
	if !assert.Nil(t, resp) {
		_ = resp.Body.Close()
	}
	assert.EqualError(t, err, want)
	var ce *transport.ConfigError
	assert.ErrorAs(t, err, &ce, "a configuration error is a *transport.ConfigError, so that middleware above passes it on")
	assert.True(t, body.Closed(), "the request body is closed")
	assert.Zero(t, hits.Load(), "a request through an invalid configuration reached the server")
}
