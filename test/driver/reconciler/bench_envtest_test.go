package reconciler_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

// benchRig creates n running sandboxes of gateway "gw" in a fresh
// namespace, admitted under the namespace's fence, straight through the
// clientset; no controller runs, so their status stays empty, which the
// reconciler leaves alone.
func benchRig(b *testing.B, n int) (cfg *rest.Config, ns string, cs *versioned.Clientset, f fence) {
	b.Helper()
	cfg = rig.Config(b)
	cfg.QPS, cfg.Burst = -1, 0
	kube := mustKube(b, cfg)
	nsObj, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns = nsObj.Name
	d, err := driver.New(cfg, "gw", []string{ns})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	// The fence, created the way the driver creates it.
	if _, err := d.Create(context.Background(), ns, "probe", rig.AgentPod); err != nil {
		b.Fatal(err)
	}
	if err := d.Delete(context.Background(), ns, "probe"); err != nil {
		b.Fatal(err)
	}
	np, err := kube.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), rig.FenceName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f = fence{UID: np.UID, Generation: np.Generation}
	cs, err = versioned.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				s := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("sb-%05d", i), Namespace: ns,
					Labels: map[string]string{driver.LabelManagedBy: rig.DriverName, driver.LabelGateway: "gw"},
					Annotations: map[string]string{
						rig.AnnFenceUID: string(f.UID),
						rig.AnnFenceGen: strconv.FormatInt(f.Generation, 10),
					},
				}}
				s.Spec.PodTemplate = rig.AgentPod
				if _, err := cs.AgentsV1beta1().Sandboxes(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	return cfg, ns, cs, f
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRunIdle: the event-driven reconciler over n converged sandboxes
// on a real API server. It reports the requests it sends per idle minute
// (only its watches stay open: no LIST between resyncs) and the heap per
// cached sandbox, with the config a kubeconfig gives (QPS and Burst
// unset). Run with -benchtime 1x: each iteration idles 10 seconds.
func BenchmarkRunIdle(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("sandboxes=%d", n), func(b *testing.B) {
			base, ns, _, _ := benchRig(b, n)
			cfg := userConfig(base)
			var count watchCounter
			cfg.Wrap(count.wrap)
			d, err := driver.New(cfg, "gw", []string{ns})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			idle := runIdle(b, d, count.requests.Load, nil, nil)
			b.ReportMetric(idle.perMinute, "requests/idle-min")
			b.ReportMetric(float64(idle.held)/float64(n), "heap-B/sandbox")
		})
	}
}

func mustKube(b *testing.B, cfg *rest.Config) *kubernetes.Clientset {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return kube
}
