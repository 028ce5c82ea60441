package retry_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
)

// TestClassifyFromTheWire: each HTTP/2 failure, produced by a real server
// on a real connection, gets the same class and the same cost to the retry
// budget whichever HTTP/2 client met it:
// net/http's own (bundled in Go 1.26, built in from Go 1.27) or
// x/net/http2's Transport (its own code in Go 1.26, a wrapper over net/http
// from Go 1.27). The requests carry a body net/http cannot rewind, so that
// its HTTP/2 client returns the errors it would otherwise retry itself.
func TestClassifyFromTheWire(t *testing.T) {
	tests := []struct {
		name   string
		handle func(*H2Conn, H2Request)
		want   retry.Class
		// wantCost is what the failure costs the retry budget.
		wantCost string
	}{
		{"GOAWAY before the stream", func(c *H2Conn, r H2Request) {
			_ = c.GoAway(r.StreamID-1, http2.ErrCodeNo)
		}, retry.NotSent, "none"},
		{"REFUSED_STREAM", func(c *H2Conn, r H2Request) {
			_ = c.Reset(r.StreamID, http2.ErrCodeRefusedStream)
		}, retry.NotSent, "none"},
		{"stream reset INTERNAL_ERROR", func(c *H2Conn, r H2Request) {
			_ = c.Reset(r.StreamID, http2.ErrCodeInternal)
		}, retry.MaybeSent, "request"},
		{"stream reset CANCEL", func(c *H2Conn, r H2Request) {
			_ = c.Reset(r.StreamID, http2.ErrCodeCancel)
		}, retry.MaybeSent, "request"},
		{"GOAWAY covering the stream, then close", func(c *H2Conn, r H2Request) {
			_ = c.GoAway(r.StreamID, http2.ErrCodeInternal)
			_ = c.Close()
		}, retry.MaybeSent, "connection"},
		{"connection closed", func(c *H2Conn, r H2Request) {
			_ = c.Close()
		}, retry.MaybeSent, "connection"},
		{"connection reset", func(c *H2Conn, r H2Request) {
			_ = c.ResetConn()
		}, retry.MaybeSent, "connection"},
		{"health check: connection lost", func(c *H2Conn, r H2Request) {
			c.Silence()
		}, retry.MaybeSent, "connection"},
	}
	clients := []struct {
		name string
		new  func(*tls.Config) (http.RoundTripper, func())
	}{
		{"net/http", func(c *tls.Config) (http.RoundTripper, func()) {
			tr, err := transport.New(transport.WithTLSConfig(c), transport.WithHTTP2ReadIdleTimeout(50*time.Millisecond), transport.WithHTTP2PingTimeout(50*time.Millisecond))
			require.NoError(t, err)
			return tr, tr.CloseIdleConnections
		}},
		{"x/net/http2", func(c *tls.Config) (http.RoundTripper, func()) {
			tr := &http2.Transport{TLSClientConfig: c, ReadIdleTimeout: 50 * time.Millisecond, PingTimeout: 50 * time.Millisecond}
			return tr, tr.CloseIdleConnections
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := NewRawH2(t, tt.handle)
			for _, cl := range clients {
				rt, closeIdle := cl.new(srv.ClientTLS)
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/", io.NopCloser(strings.NewReader("{}")))
				require.NoError(t, err)
				resp, err := rt.RoundTrip(req)
				if resp != nil {
					_ = resp.Body.Close()
				}
				closeIdle()
				require.Error(t, err, cl.name)
				t.Logf("%s: %T %v", cl.name, err, err)
				assert.Equal(t, tt.want, retry.Classify(err), "%s: %v", cl.name, err)
				assert.Equal(t, tt.wantCost, retry.BudgetCause(err), "%s: %v", cl.name, err)
			}
		})
	}
}
