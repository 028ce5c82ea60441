package bench_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/test/kubetest"
)

func benchGet(b *testing.B, cfg *rest.Config) {
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling in a benchmark
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClientGoBare is a GET through a stock client-go clientset
// against the real API server: the baseline of BenchmarkClientGoApplied.
func BenchmarkClientGoBare(b *testing.B) {
	benchGet(b, kubetest.Shared("").Config(b))
}

// BenchmarkClientGoApplied is the same GET after kubeadapter.Apply.
func BenchmarkClientGoApplied(b *testing.B) {
	cfg := kubetest.Shared("").Config(b)
	if err := kubeadapter.Apply(cfg); err != nil {
		b.Fatal(err)
	}
	benchGet(b, cfg)
}
