package retry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestNoReplayContract(t *testing.T) {
	transporttest.TestMiddleware(t, retry.NoReplay())
}

// TestNoReplay: a POST that carries an Idempotency-Key or X-Idempotency-Key
// header goes through NoReplay, right above a plain net/http transport,
// to a server that applies it and closes the reused connection without
// answering. net/http re-sends it by itself when the resend rule allows it
// (the default, IsIdempotent, counts the header), and sends it once when
// the rule refuses it: the caller gets net/http's error. Either way the
// header reaches the server, and the caller's header map is not modified.
func TestNoReplay(t *testing.T) {
	refuse := func(*http.Request) bool { return false }
	tests := []struct {
		name   string
		opts   []retry.Option
		header string
		want   int32 // POSTs the server receives
	}{
		{"the default rule", nil, "Idempotency-Key", 2},
		{"the default rule, X-Idempotency-Key", nil, "X-Idempotency-Key", 2},
		{"a rule that refuses it", []retry.Option{retry.WithResendable(refuse)}, "Idempotency-Key", 1},
		{"a rule that refuses it, X-Idempotency-Key", []retry.Option{retry.WithResendable(refuse)}, "X-Idempotency-Key", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Method != http.MethodPost {
					return
				}
				assert.Equal(t, []string{"k1"}, r.Header[tt.header], "the header reached the server")
				if posts.Add(1) == 1 {
					// Applied, then the connection is closed unanswered.
					panic(http.ErrAbortHandler)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			base, err := transport.New()
			require.NoError(t, err)
			t.Cleanup(base.CloseIdleConnections)
			client := &http.Client{Transport: retry.NoReplay(tt.opts...)(base)}

			resp, err := client.Get(srv.URL)
			require.NoError(t, err, "warms the connection the POST reuses")
			require.NoError(t, resp.Body.Close())
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
			require.NoError(t, err)
			req.Header.Set(tt.header, "k1")
			header, before := req.Header, req.Header.Clone()
			resp, err = client.Transport.RoundTrip(req)
			assert.Equal(t, tt.want, posts.Load(), "POSTs the server received")
			assert.Equal(t, before, req.Header, "the caller's header is not modified")
			header["X-Probe"] = nil
			assert.Contains(t, req.Header, "X-Probe", "the caller's header map is not replaced")
			if tt.want == 2 {
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				return
			}
			require.Error(t, err, "the caller is not told the POST succeeded")
		})
	}
}

// TestNoReplayRenames: a write the rule refuses reaches the transport with
// its Idempotency-Key and X-Idempotency-Key headers under their lower-case
// keys, after the values already there, which net/http does not count; a
// read, a write the rule allows and a write without those headers reach it
// as they are, and the rule is asked only about a write with one of them.
func TestNoReplayRenames(t *testing.T) {
	tests := []struct {
		name   string
		method string
		header http.Header
		allow  bool
		want   http.Header // what reaches the transport; nil: the request itself
		asked  int32
	}{
		{name: "refused", method: http.MethodPost,
			header: http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}, "idempotency-key": {"k0"}, "Content-Type": {"application/json"}},
			want:   http.Header{"idempotency-key": {"k1", "k0"}, "x-idempotency-key": {"k2"}, "Content-Type": {"application/json"}}, asked: 1},
		{name: "refused, no value", method: http.MethodPatch, header: http.Header{"Idempotency-Key": nil},
			want: http.Header{"idempotency-key": nil}, asked: 1},
		{name: "allowed", method: http.MethodPost, header: http.Header{"Idempotency-Key": {"k1"}}, allow: true, asked: 1},
		{name: "no such header", method: http.MethodPost, header: http.Header{"idempotency-key": {"k1"}}},
		{name: "a read", method: http.MethodGet, header: http.Header{"Idempotency-Key": {"k1"}}},
		{name: "no method, a GET", method: "", header: http.Header{"Idempotency-Key": {"k1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int32
			rule := retry.WithResendable(func(r *http.Request) bool {
				asked.Add(1)
				assert.Equal(t, tt.header, r.Header, "the rule sees the request as it came")
				return tt.allow
			})
			req, err := http.NewRequest(tt.method, "http://127.0.0.1/", nil)
			require.NoError(t, err)
			req.Header = tt.header.Clone()
			var got *http.Request
			rt := retry.NoReplay(rule)(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				got = r
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
			}))
			_, err = rt.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, tt.asked, asked.Load(), "calls of the rule")
			assert.Equal(t, tt.header, req.Header, "the caller's header is not modified")
			if tt.want == nil {
				assert.Same(t, req, got, "the request passes as it is")
				return
			}
			assert.NotSame(t, req, got)
			assert.Equal(t, tt.want, got.Header)
		})
	}
}

// TestNoReplayInvalidOptions: invalid options fail every request with the
// error retry.New's requests fail with, without sending it.
func TestNoReplayInvalidOptions(t *testing.T) {
	transporttest.TestConfigError(t, context.Background(), retry.NoReplay(retry.WithMaxAttempts(0)), "retry: WithMaxAttempts must be at least 1, got 0")
	transporttest.TestConfigError(t, context.Background(), retry.NoReplay(retry.WithResendable(nil)), "retry: WithResendable must not be nil")
}

// TestNoReplayAllocs: a request without those headers, or a read, costs
// nothing: no allocation, and no call of the rule.
func TestNoReplayAllocs(t *testing.T) {
	var asked atomic.Int32
	resp := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}
	rt := retry.NoReplay(retry.WithResendable(func(*http.Request) bool {
		asked.Add(1)
		return false
	}))(roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil }))
	post, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", strings.NewReader("{}"))
	require.NoError(t, err)
	post.Header.Set("Content-Type", "application/json")
	get, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	require.NoError(t, err)
	get.Header.Set("Idempotency-Key", "k1")
	for _, req := range []*http.Request{post, get} {
		assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = rt.RoundTrip(req) }), "%s", req.Method)
	}
	assert.Zero(t, asked.Load(), "calls of the rule")
}
