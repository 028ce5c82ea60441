package kubeadapter_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/stack"
)

// TestNoReplayOfRefusedWrite: a POST that carries an Idempotency-Key or
// X-Idempotency-Key header, which the API server ignores, reaches the
// server once after Apply when the server applies it and closes the
// connection without answering, as the same POST without the header does.
// net/http's Transport, below the stack, re-sends a request with that
// header by itself when a reused connection fails after the request was
// written; before the fix it did, and the caller was told the POST
// succeeded. The header still reaches the server. A POST the resend rule
// allows (a dry run) is still sent again.
//
// The header is set by the caller or by a call middleware
// (stack.WithCallMiddleware), above the retry layer, or below it: by an
// attempt middleware (stack.WithAttemptMiddleware), or by a wrapper of the
// config's own, set before Apply over kubeadapter.NoReplay. Before the
// guard right above the base transport (retry.NoReplay), a header set
// below the retry layer reached net/http as it was set, and such a POST
// was applied twice and reported as a success.
func TestNoReplayOfRefusedWrite(t *testing.T) {
	tests := []replayCase{
		{name: "no header", want: 1},
		{name: "Idempotency-Key", header: http.Header{"Idempotency-Key": {"k1"}}, want: 1},
		{name: "X-Idempotency-Key", header: http.Header{"X-Idempotency-Key": {"k1"}}, want: 1},
		{name: "Idempotency-Key without a value", header: http.Header{"Idempotency-Key": nil}, want: 1},
		{name: "both, and the lower-case key", header: http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}, "idempotency-key": {"k0"}}, want: 1,
			seen: http.Header{"Idempotency-Key": {"k1", "k0"}, "X-Idempotency-Key": {"k2"}}},
		{name: "dry run", header: http.Header{"Idempotency-Key": {"k1"}}, query: "?dryRun=All", want: 2},
	}
	for _, by := range []string{"caller", "call middleware", "attempt middleware", "config's wrapper over NoReplay"} {
		t.Run(by, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, by) })
			}
		})
	}
}

// replayCase is a row of TestNoReplayOfRefusedWrite.
type replayCase struct {
	name   string
	header http.Header
	query  string
	want   int32       // POSTs the server receives
	seen   http.Header // what the server reads, where it differs from header
}

// run sends the POST, with its header set where by says.
func (tt replayCase) run(t *testing.T, by string) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			_, _ = io.WriteString(w, `{}`)
			return
		}
		seen := tt.seen
		if seen == nil {
			seen = tt.header
		}
		for k, v := range seen {
			assert.Equal(t, v, r.Header[k], "the header %s reached the server", k)
		}
		if posts.Add(1) == 1 {
			// Applied, then the connection is closed unanswered.
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	var opts []kubeadapter.Option
	set := func(next http.RoundTripper) http.RoundTripper { return &headerSetter{next: next, header: tt.header} }
	switch by {
	case "call middleware":
		opts = append(opts, kubeadapter.WithStackOptions(stack.WithCallMiddleware(set)))
	case "attempt middleware":
		opts = append(opts, kubeadapter.WithStackOptions(stack.WithAttemptMiddleware(set)))
	case "config's wrapper over NoReplay":
		// NoReplay first: rest.Config.Wrap puts each wrapper over those
		// before it.
		cfg.Wrap(kubeadapter.NoReplay)
		cfg.Wrap(set)
	}
	require.NoError(t, kubeadapter.Apply(cfg, opts...))
	client, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)
	get, err := client.Get(srv.URL + "/api/v1/namespaces/ns/configmaps/cm")
	require.NoError(t, err, "warms the connection the POST reuses")
	_, _ = io.Copy(io.Discard, get.Body)
	require.NoError(t, get.Body.Close())

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/ns/configmaps"+tt.query,
		strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if by == "caller" {
		for k, v := range tt.header {
			req.Header[k] = v
		}
	}
	before := req.Header.Clone()
	resp, err := client.Do(req)
	assert.Equal(t, tt.want, posts.Load(), "POSTs the server received")
	assert.Equal(t, before, req.Header, "the caller's header is not modified")
	if tt.want == 2 {
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return
	}
	require.Error(t, err, "the caller is not told the POST succeeded")
	var re *retry.Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, retry.ReasonNotIdempotent, re.Reason, "%v", err)
}

// headerSetter is a middleware that sends each POST as a copy with header
// added, as a middleware that sets a header must: the request it is given
// is not modified.
type headerSetter struct {
	next   http.RoundTripper
	header http.Header
}

func (s *headerSetter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || len(s.header) == 0 {
		return s.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	for k, v := range s.header {
		r.Header[k] = v
	}
	return s.next.RoundTrip(r)
}

func (s *headerSetter) WrappedRoundTripper() http.RoundTripper { return s.next }
