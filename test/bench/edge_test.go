package bench_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/repro"
	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/transport/transporttest"
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
	s := repro.NewServer(latency, false)
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
					rt, err = repro.NaiveClient(s, limit, logr.Discard())
				} else {
					rt, err = repro.KubewireClient(s, limit, logr.Discard())
				}
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer roundtrip.CloseIdleConnections(rt)
					r := repro.Probe(context.Background(), s, rt, method, gap, fmt.Sprintf("%s-%d-%d", client, i, j))
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

// recoveryServer answers GET /api/v1/namespaces/default through a fault
// proxy, so that a benchmark can reset the connection after the server
// executed a request.
func recoveryServer(b *testing.B) (string, *transporttest.Proxy) {
	return transporttest.BehindProxy(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`)
	}))
}

// benchRecovery measures the time to success of a GET whose first answer
// is lost to a connection reset after the server executed it, on a fresh
// connection (so net/http does not re-send it itself).
func benchRecovery(b *testing.B, apply bool) {
	host, p := recoveryServer(b)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := &rest.Config{Host: host, QPS: -1}
		cfg.Dial = (&net.Dialer{}).DialContext // a pool of its own
		if apply {
			if err := kubeadapter.Apply(cfg); err != nil {
				b.Fatal(err)
			}
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
		if err != nil {
			b.Fatal(err)
		}
		p.SetFaultOnce(transporttest.ResetAfterResponse)
		b.StartTimer()
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		hc.CloseIdleConnections()
		b.StartTimer()
	}
}

// BenchmarkRecoveryClientGo is stock client-go: its own GET retry waits a
// synthetic Retry-After of 1s.
func BenchmarkRecoveryClientGo(b *testing.B) { benchRecovery(b, false) }

// BenchmarkRecoveryKubewire is the same GET after kubeadapter.Apply: the
// retry middleware re-sends it after a jittered backoff of at most 100ms.
func BenchmarkRecoveryKubewire(b *testing.B) { benchRecovery(b, true) }
