package repro_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/internal/repro"
	"github.com/kubewire/kubewire/pooltrace"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestIdleConnectionReadTimeout is the field report's regression test: a
// read timeout on the connection fails requests sent on a connection that
// sat idle for nearly the timeout (client A); kubewire's per-request budget
// of the same length does not (client B).
func TestIdleConnectionReadTimeout(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := repro.Config{
				Budget:  2 * time.Second,
				Latency: 300 * time.Millisecond,
				// The edge is at 1.7s: the last gap that leaves client A
				// enough time is 1.4s, the first that does not is 1.8s.
				Gaps:  []time.Duration{0, time.Second, 1400 * time.Millisecond, 1800 * time.Millisecond, 1900 * time.Millisecond},
				HTTP2: h2,
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results, err := repro.Sweep(ctx, cfg)
			require.NoError(t, err)
			require.Len(t, results, len(cfg.Gaps)*4)
			aFailed := 0
			for _, r := range results {
				assert.NoError(t, repro.Expect(cfg, r))
				if r.Client == "A" && (r.Err != nil || r.Executions > 1) {
					aFailed++
				}
				if r.Client == "A" && r.Err != nil {
					// The error names the connection it died on.
					var pe *pooltrace.Error
					require.True(t, errors.As(err, &pe) || errors.As(r.Err, &pe), "no connection facts in %v", r.Err)
					assert.True(t, pe.Attempt.Conn.Reused)
					assert.Greater(t, pe.Attempt.Conn.IdleTime, 1700*time.Millisecond)
					assert.Contains(t, r.Err.Error(), "i/o timeout")
					assert.Contains(t, r.Err.Error(), "on connection reused after")
				}
			}
			// Gaps 1.8s and 1.9s, GET and PATCH.
			assert.Equal(t, 4, aFailed, "client A should fail (or, for HTTP/1.1 GETs, be re-sent) at the two gaps near its timeout")
		})
	}
}

func TestExpectRejectsWrongOutcome(t *testing.T) {
	cfg := repro.Config{Budget: 2 * time.Second, Latency: 300 * time.Millisecond}
	tests := []struct {
		name string
		give repro.Result
	}{
		{"B failed", repro.Result{Client: "B", Method: http.MethodGet, Gap: time.Second, Err: errors.New("x"), Executions: 1}},
		{"B ran twice", repro.Result{Client: "B", Method: http.MethodPatch, Gap: 1900 * time.Millisecond, Executions: 2}},
		{"A did not fail", repro.Result{Client: "A", Method: http.MethodPatch, Gap: 1900 * time.Millisecond, Executions: 1}},
		{"A GET not re-sent", repro.Result{Client: "A", Method: http.MethodGet, Gap: 1900 * time.Millisecond, Executions: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Error(t, repro.Expect(cfg, tt.give))
		})
	}
}
