package bench_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/transport/transporttest"
)

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
