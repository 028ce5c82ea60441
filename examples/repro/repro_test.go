package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
)

// TestIdleConnectionReadTimeout is the field report's regression test: a
// read timeout on the connection fails requests sent on a connection that
// sat idle for nearly the timeout (client A); kubewire's per-request timeout
// of the same length does not (client B).
func TestIdleConnectionReadTimeout(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{
				Timeout: 2 * time.Second,
				Latency: 300 * time.Millisecond,
				// The edge is at 1.7s: the last gap that leaves client A
				// enough time is 1.4s, the first that does not is 1.8s.
				Gaps:  []time.Duration{0, time.Second, 1400 * time.Millisecond, 1800 * time.Millisecond, 1900 * time.Millisecond},
				HTTP2: h2,
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results, err := Sweep(ctx, cfg)
			require.NoError(t, err)
			require.Len(t, results, len(cfg.Gaps)*4)
			starved := map[string]int{}
			for _, r := range results {
				assert.NoError(t, Expect(cfg, r))
				if Starved(cfg, r) {
					starved[r.Method]++
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
			// Expect checked that client A failed (or, for HTTP/1.1 GETs, was
			// re-sent) exactly when starved. Gaps 1.8s and 1.9s starve it,
			// unless the machine was so slow that its connection died idle
			// before the request went out: at least one of each must have.
			assert.GreaterOrEqual(t, starved[http.MethodGet], 1, "a GET reached client A's timeout edge")
			assert.GreaterOrEqual(t, starved[http.MethodPatch], 1, "a PATCH reached client A's timeout edge")
		})
	}
}

func TestExpectRejectsWrongOutcome(t *testing.T) {
	cfg := Config{Timeout: 2 * time.Second, Latency: 300 * time.Millisecond}
	tests := []struct {
		name string
		give Result
	}{
		{"B failed", Result{Client: "B", Method: http.MethodGet, Gap: time.Second, Err: errors.New("x"), Executions: 1}},
		{"B ran twice", Result{Client: "B", Method: http.MethodPatch, Gap: 1900 * time.Millisecond, Executions: 2}},
		{"A did not fail", Result{Client: "A", Method: http.MethodPatch, Gap: 1900 * time.Millisecond, Executions: 1, Reused: true, Idle: 1900 * time.Millisecond}},
		{"A GET not re-sent", Result{Client: "A", Method: http.MethodGet, Gap: 1900 * time.Millisecond, Executions: 1, Reused: true, Idle: 1900 * time.Millisecond}},
		{"A failed on a new connection", Result{Client: "A", Method: http.MethodPatch, Gap: 1900 * time.Millisecond, Err: errors.New("x"), Executions: 1}},
		{"A failed with time to spare", Result{Client: "A", Method: http.MethodPatch, Gap: 1400 * time.Millisecond, Err: errors.New("x"), Executions: 1, Reused: true, Idle: 1400 * time.Millisecond}},
		{"A failed with time to spare under load", Result{Client: "A", Method: http.MethodPatch, Gap: time.Second, Err: errors.New("x"), Executions: 1, Reused: true, Idle: time.Second, Answered: 900 * time.Millisecond}},
		{"A PATCH ran twice, too close to call", Result{Client: "A", Method: http.MethodPatch, Gap: 1400 * time.Millisecond, Executions: 2, Reused: true, Idle: 1400 * time.Millisecond, Answered: time.Second}},
		{"A GET ran three times, past its timeout", Result{Client: "A", Method: http.MethodGet, Gap: 1900 * time.Millisecond, Executions: 3, Reused: true, Idle: 2100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Error(t, Expect(cfg, tt.give))
		})
	}
}

// TestExpectTooCloseToCall: on a machine loaded enough that an answer took
// longer than client A had left, though the server's latency fit, either
// outcome of client A's request proves nothing: the rows a loaded run
// showed.
func TestExpectTooCloseToCall(t *testing.T) {
	cfg := Config{Timeout: 2 * time.Second, Latency: 300 * time.Millisecond}
	for _, r := range []Result{
		{Client: "A", Method: http.MethodGet, Gap: time.Second, Executions: 2, Reused: true, Idle: time.Second, Answered: 1080 * time.Millisecond},
		{Client: "A", Method: http.MethodPatch, Gap: 1400 * time.Millisecond, Err: errors.New("i/o timeout"), Executions: 1, Reused: true, Idle: 1530 * time.Millisecond, Answered: 1070 * time.Millisecond},
		{Client: "A", Method: http.MethodPatch, Gap: 1400 * time.Millisecond, Executions: 1, Reused: true, Idle: 1400 * time.Millisecond, Answered: 1070 * time.Millisecond},
		{Client: "A", Method: http.MethodGet, Gap: 1900 * time.Millisecond, Executions: 2, Reused: true, Idle: 2157 * time.Millisecond, Answered: 420 * time.Millisecond},
	} {
		assert.NoError(t, Expect(cfg, r), "%+v", r)
	}
}
