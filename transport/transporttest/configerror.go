package transporttest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/kubewire/kubewire/transport"
)

// TestConfigError checks mw, a middleware built with invalid options, the
// way kubewire's own middleware report bad input: a POST through it with
// ctx fails with an error whose text is exactly want and no response; the
// error is, or wraps, a *transport.ConfigError; the request body is
// closed; and nothing reaches the server.
//
// A middleware has no error result (its shape is
// func(http.RoundTripper) http.RoundTripper), so an invalid configuration
// surfaces on every request instead. It must be a *transport.ConfigError
// because the middleware above passes that on as it is: stack's retry does
// not count it as an attempt, nor retry it. ctx carries per-request
// settings, for a middleware that reads them from the context.
func TestConfigError(t *testing.T, ctx context.Context, mw func(http.RoundTripper) http.RoundTripper, want string) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	b := newBody("{}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mw(newBase(t)).RoundTrip(req)
	if resp != nil {
		t.Errorf("a response (%d) to a request through an invalid configuration", resp.StatusCode)
		_ = resp.Body.Close()
	}
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	var ce *transport.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("the error is a %T, not a *transport.ConfigError, so that middleware above would not pass it on", err)
	}
	if !b.Closed() {
		t.Error("the request body is not closed")
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests through an invalid configuration reached the server", n)
	}
}
