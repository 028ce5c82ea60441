package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// BenchmarkIdleEdge sends requests after idle gaps spread evenly over the
// last 20% of a 1s timeout, against a server that answers in 100ms: a
// connection-level read deadline (client A) fails every request whose gap
// leaves less than 100ms, a kubewire timeout (client B) none. A failure is an
// error, or a request the server executed twice (net/http's silent re-send
// of a GET). Each iteration sends 100 requests per client, half GET, half
// PATCH; the metrics are failure percentages.
func BenchmarkIdleEdge(b *testing.B) {
	const limit, latency, probes = time.Second, 100 * time.Millisecond, 100
	s := NewServer(latency, false)
	b.Cleanup(s.Close)
	var failA, failB, total int
	for i := 0; i < b.N; i++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for j := 0; j < probes; j++ {
			gap := limit - 2*latency + time.Duration(j)*2*latency/probes
			method := http.MethodGet
			if j%2 == 1 {
				method = http.MethodPatch
			}
			for _, client := range []string{"A", "B"} {
				var rt http.RoundTripper
				var err error
				if client == "A" {
					rt, err = NaiveClient(s, limit, logr.Discard())
				} else {
					rt, err = KubewireClient(s, limit, logr.Discard())
				}
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer (&http.Client{Transport: rt}).CloseIdleConnections()
					r := Probe(context.Background(), s, rt, method, gap, fmt.Sprintf("%s-%d-%d", client, i, j))
					failed := r.Err != nil || r.Executions != 1
					mu.Lock()
					defer mu.Unlock()
					if failed && client == "A" {
						failA++
					} else if failed {
						failB++
					}
				}()
			}
			total++
		}
		wg.Wait()
	}
	b.ReportMetric(100*float64(failA)/float64(total), "A-fail-%")
	b.ReportMetric(100*float64(failB)/float64(total), "B-fail-%")
	b.ReportMetric(float64(total)/float64(b.N), "requests/client/op")
}
