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
func TestNoReplayOfRefusedWrite(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		query  string
		want   int32       // POSTs the server receives
		seen   http.Header // what the server reads, where it differs from header
	}{
		{name: "no header", want: 1},
		{name: "Idempotency-Key", header: http.Header{"Idempotency-Key": {"k1"}}, want: 1},
		{name: "X-Idempotency-Key", header: http.Header{"X-Idempotency-Key": {"k1"}}, want: 1},
		{name: "Idempotency-Key without a value", header: http.Header{"Idempotency-Key": nil}, want: 1},
		{name: "both, and the lower-case key", header: http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}, "idempotency-key": {"k0"}}, want: 1,
			seen: http.Header{"Idempotency-Key": {"k1", "k0"}, "X-Idempotency-Key": {"k2"}}},
		{name: "dry run", header: http.Header{"Idempotency-Key": {"k1"}}, query: "?dryRun=All", want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
			require.NoError(t, kubeadapter.Apply(cfg))
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
			for k, v := range tt.header {
				req.Header[k] = v
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
		})
	}
}
