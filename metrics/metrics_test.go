package metrics_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/metrics"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// labels are the documented label names of every metric.
var labels = map[string][]string{
	"kubewire_http_attempts_total":           {"method", "protocol", "reused", "outcome"},
	"kubewire_http_attempt_duration_seconds": {"method", "outcome"},
	"kubewire_http_connection_idle_seconds":  {"protocol"},
	"kubewire_http_resends_total":            {"method"},
	"kubewire_retry_retries_total":           {"method", "class"},
	"kubewire_retry_gave_up_total":           {"method", "reason"},
	"kubewire_timeout_exceeded_total":        {"method", "phase"},
}

func noWait(int) time.Duration { return 0 }

// TestContract: the observed stack is a middleware like any other; the
// observers it adds must keep the RoundTripper contract. The timeout is
// one no request of the suite comes near: its concurrent case queues 32
// requests, which on a loaded machine can wait past a few seconds.
func TestContract(t *testing.T) {
	m := metrics.New()
	transporttest.TestMiddleware(t, m.Stack(30*time.Second))
	// The suite's requests were observed: the observers ran.
	assert.NotZero(t, testutil.CollectAndCount(m, "kubewire_http_attempts_total"))
}

// TestScriptedRun sends requests through real sockets and a fault proxy:
// a timeout on a reused connection, a retried reset, a refused
// non-idempotent write, a retry-budget refusal and a re-send by net/http. Each
// is counted once, under the documented labels only.
func TestScriptedRun(t *testing.T) {
	var slowCalls atomic.Int32
	url, proxy := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" && slowCalls.Add(1) == 1 {
			select { // the client gives up first
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	client := func(opts ...retry.Option) *http.Client {
		base, err := transport.New()
		require.NoError(t, err)
		t.Cleanup(base.CloseIdleConnections)
		return &http.Client{Transport: m.Stack(10*time.Second, append(opts, retry.WithBackoff(noWait))...)(base)}
	}
	c := client()
	send := func(c *http.Client, method, path string) error {
		ctx := context.Background()
		if path == "/slow" {
			ctx = timeout.ContextWithTimeout(ctx, time.Second)
		}
		// A GET has no body, as client-go's do: with one, net/http may
		// still be writing it when the proxy's close (a reset, with the
		// byte unread) arrives, and a failed write is not re-sent, so the
		// re-send below would sometimes be kubewire's retry instead.
		var body io.Reader
		if method != http.MethodGet {
			body = strings.NewReader("x")
		}
		req, err := http.NewRequestWithContext(ctx, method, url+path, body)
		require.NoError(t, err)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}

	// A timeout on a reused connection, retried on a new one.
	require.NoError(t, send(c, http.MethodGet, "/"))
	require.NoError(t, send(c, http.MethodGet, "/slow"))
	// A reset after the server answered a PUT: retried.
	proxy.SetFaultOnce(transporttest.ResetAfterResponse)
	require.NoError(t, send(c, http.MethodPut, "/"))
	// The same for a POST: not re-sent, it is not idempotent.
	proxy.SetFaultOnce(transporttest.ResetAfterResponse)
	require.Error(t, send(c, http.MethodPost, "/"))
	// The same for a DELETE with an empty retry budget: refused.
	proxy.SetFaultOnce(transporttest.ResetAfterResponse)
	require.Error(t, send(client(retry.WithBudget(0, 0)), http.MethodDelete, "/"))
	// A reused connection the server closes as the GET arrives: net/http
	// re-sends the GET on a new one by itself.
	require.NoError(t, send(c, http.MethodGet, "/"))
	proxy.SetFaultOnce(transporttest.CloseOnSend)
	require.NoError(t, send(c, http.MethodGet, "/"))

	const want = `
# HELP kubewire_http_resends_total Requests net/http re-sent on its own after they failed on a reused connection; the server may have executed them twice.
# TYPE kubewire_http_resends_total counter
kubewire_http_resends_total{method="GET"} 1
# HELP kubewire_retry_gave_up_total Requests whose retrying stopped without success, by method and reason (budget: the retry budget refused; maybe_applied: a re-sent write was refused, and its earlier copy may have been applied).
# TYPE kubewire_retry_gave_up_total counter
kubewire_retry_gave_up_total{method="DELETE",reason="budget"} 1
kubewire_retry_gave_up_total{method="POST",reason="not_idempotent"} 1
# HELP kubewire_retry_retries_total Retries made, by method and the class of the failure (not_sent, maybe_sent, status).
# TYPE kubewire_retry_retries_total counter
kubewire_retry_retries_total{class="maybe_sent",method="GET"} 1
kubewire_retry_retries_total{class="maybe_sent",method="PUT"} 1
# HELP kubewire_timeout_exceeded_total Requests whose timeout ran out, by method and phase (headers, body, stalled).
# TYPE kubewire_timeout_exceeded_total counter
kubewire_timeout_exceeded_total{method="GET",phase="headers"} 1
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kubewire_http_resends_total", "kubewire_retry_gave_up_total", "kubewire_retry_retries_total", "kubewire_timeout_exceeded_total"))

	// The timeout is counted as an attempt that failed on a reused
	// connection, whose idle time is recorded.
	families, err := reg.Gather()
	require.NoError(t, err)
	var timedOut, idle float64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			assert.ElementsMatch(t, labels[f.GetName()], names, "labels of %s", f.GetName())
			switch f.GetName() {
			case "kubewire_http_attempts_total":
				if got["method"] == "GET" && got["reused"] == "true" && got["outcome"] == "error" {
					timedOut += mt.GetCounter().GetValue()
				}
				assert.Equal(t, "HTTP/1.1", got["protocol"])
			case "kubewire_http_connection_idle_seconds":
				idle += float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	assert.Equal(t, 1.0, timedOut, "attempts that failed on a reused connection with GET")
	assert.Positive(t, idle, "idle times of reused connections")

	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestHTTP2 counts attempts over HTTP/2 under their protocol.
func TestHTTP2(t *testing.T) {
	srv := transporttest.NewServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).HTTP2
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	c := &http.Client{Transport: m.Stack(time.Second)(srv.Base)}
	for range 2 {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	var b bytes.Buffer
	b.WriteString(`
# HELP kubewire_http_attempts_total Request attempts, by method, protocol, whether the connection was reused, and outcome (status class or error).
# TYPE kubewire_http_attempts_total counter
kubewire_http_attempts_total{method="GET",outcome="2xx",protocol="HTTP/2.0",reused="false"} 1
kubewire_http_attempts_total{method="GET",outcome="2xx",protocol="HTTP/2.0",reused="true"} 1
`)
	assert.NoError(t, testutil.GatherAndCompare(reg, &b, "kubewire_http_attempts_total"))
}
