package transporttest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kubewire/kubewire/transport"
)

// TestConfigError checks mw, a middleware built with invalid options, the
// way kubewire's own middleware report bad input: a POST through it with
// ctx fails with an error that contains want and no response; the error
// is, or wraps, a *transport.ConfigError; the request body is closed; and
// nothing reaches the server.
//
// A middleware has no error result (its shape is
// func(http.RoundTripper) http.RoundTripper), so an invalid configuration
// surfaces on every request instead, far from the line that built it.
// want is what the error must say for its reader to find that line: the
// option's name and the value it refused. It is matched as a part of the
// error, so that wrapping above mw does not break the check; an empty
// want fails tb. The error must be a *transport.ConfigError because the
// middleware above passes that on as it is: stack's retry does not count
// it as an attempt, nor retry it.
//
// ctx is the request's context: a middleware that reads per-request
// settings from it (timeout.ContextWithTimeout) is checked with the invalid ones
// there; others pass tb.Context(). It runs no subtests, so a benchmark or
// a fuzz target may call it too.
func TestConfigError(tb testing.TB, ctx context.Context, mw func(http.RoundTripper) http.RoundTripper, want string) {
	tb.Helper()
	if want == "" {
		tb.Fatal("TestConfigError needs the text the error must contain")
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	b := newBody("{}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, b)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := mw(newBase(tb)).RoundTrip(req)
	if resp != nil {
		tb.Errorf("a response (%d) to a request through an invalid configuration", resp.StatusCode)
		_ = resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		tb.Errorf("error %v, want one that says %q", err, want)
	}
	var ce *transport.ConfigError
	if !errors.As(err, &ce) {
		tb.Errorf("the error is a %T, not a *transport.ConfigError, so that middleware above would not pass it on", err)
	}
	if !b.Closed() {
		tb.Error("the request body is not closed")
	}
	if n := hits.Load(); n != 0 {
		tb.Errorf("%d requests through an invalid configuration reached the server", n)
	}
}
