package main

// The gateway's benchmarks, against a real API server: what the gate adds
// per request, and what a flood of unknown tokens costs the callers it
// lets in.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/driver"
)

// BenchmarkGate: what the gate adds to a list of an empty namespace, per
// request, for a warm caller: the ratio of ns/op against open (no gate)
// in the same run, and the API server requests it adds (reviews/op, 0).
func BenchmarkGate(b *testing.B) {
	cfg, cs, ns := newNamespace(b, "gw-bench-")
	token := applyCaller(b, cs, []string{ns.Name}, "agent-team")
	path := "/v1/namespaces/" + ns.Name + "/sandboxes"
	run := func(b *testing.B, url, token string, reviews *reviewCounter) {
		warm := func() {
			req, err := http.NewRequest(http.MethodGet, url+path, nil)
			require.NoError(b, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(b, err)
			require.NoError(b, resp.Body.Close())
			require.Equal(b, http.StatusOK, resp.StatusCode)
		}
		warm()
		start := reviews.n.Load()
		b.ResetTimer()
		for b.Loop() {
			warm()
		}
		b.ReportMetric(float64(reviews.n.Load()-start)/float64(b.N), "reviews/op")
	}
	b.Run("open", func(b *testing.B) {
		d, err := driver.New(cfg, "gw-open", []string{ns.Name})
		require.NoError(b, err)
		b.Cleanup(d.Close)
		srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), logr.Discard(), nil, nil))
		b.Cleanup(srv.Close)
		run(b, srv.URL, "", &reviewCounter{})
	})
	b.Run("authorized", func(b *testing.B) {
		var reviews reviewCounter
		run(b, gatedServer(b, cfg, ns.Name, time.Hour, &reviews), token, &reviews)
	})
}

// BenchmarkGateFlood: callers let in, each request a list of an empty
// namespace with a token the gate knows (answers kept for a second, so
// that reviews recur), while floods clients on as many loopback addresses
// send random tokens, 32 connections each; against the same callers
// without the flood in the same run. It reports the callers' success rate
// (ok%), their p99 latency and, under the flood, p99 as a ratio of the
// quiet run's (p99-ratio).
func BenchmarkGateFlood(b *testing.B) {
	cfg, cs, ns := newNamespace(b, "gw-bflood-")
	token := applyCaller(b, cs, []string{ns.Name}, "admitted")
	var reviews reviewCounter
	url := gatedServer(b, cfg, ns.Name, time.Second, &reviews) + "/v1/namespaces/" + ns.Name + "/sandboxes"
	caller := clientFrom(b, "127.0.0.1", 4)
	var quietP99 time.Duration
	run := func(b *testing.B, floods int) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range floods {
			c := clientFrom(b, fmt.Sprintf("127.0.1.%d", i+1), 32)
			wg.Go(func() { flood(ctx, c, url, 32) })
		}
		var lat []time.Duration
		ok := 0
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			code, err := call(caller, url, token)
			lat = append(lat, time.Since(start))
			if err == nil && code == http.StatusOK {
				ok++
			}
		}
		b.StopTimer()
		cancel()
		wg.Wait()
		slices.Sort(lat)
		p99 := lat[len(lat)*99/100]
		b.ReportMetric(100*float64(ok)/float64(len(lat)), "ok%")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		if floods == 0 {
			quietP99 = p99
		} else if quietP99 > 0 {
			b.ReportMetric(float64(p99)/float64(quietP99), "p99-ratio")
		}
	}
	b.Run("quiet", func(b *testing.B) { run(b, 0) })
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("floods=%d", n), func(b *testing.B) { run(b, n) })
	}
}
