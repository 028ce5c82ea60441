package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

// BenchmarkNamespaces: the idle reconciler of a gateway that serves 1, 100
// or 1,000 namespaces of 10 converged sandboxes each, watching each
// namespace and the whole cluster, on a real API server. It reports the
// watches open once the caches have synced, the heap they hold, and the
// requests an idle minute sends, with the config a kubeconfig gives (QPS
// and Burst unset). Run with -benchtime 1x: each iteration idles 10
// seconds.
func BenchmarkNamespaces(b *testing.B) {
	const perNamespace = 10
	for _, n := range []int{1, 100, 1000} {
		cfg, namespaces := scaleRig(b, gateway(n), n, perNamespace)
		for _, cluster := range []bool{false, true} {
			b.Run(fmt.Sprintf("namespaces=%d/scope=%s", n, scopeName(cluster)), func(b *testing.B) {
				var w watchCounter
				c := userConfig(cfg)
				c.Wrap(w.wrap)
				d, err := driver.New(c, gateway(n), namespaces)
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				idle := runIdle(b, d, w.requests.Load, w.open.Load, &cluster)
				b.ReportMetric(float64(idle.watches), "watches")
				b.ReportMetric(float64(idle.held)/(1<<20), "heap-MB")
				b.ReportMetric(idle.perMinute, "requests/idle-min")
				b.ReportMetric(idle.synced.Seconds(), "sync-s")
			})
		}
	}
}

// idle is what runIdle measured.
type idle struct {
	synced    time.Duration // from Run to its caches synced
	held      uint64        // heap the running reconciler holds
	perMinute float64       // requests an idle minute sends, counted by sent
	watches   int64         // open at the end, counted by open if not nil
}

// runIdle runs a reconciler of d with its default options, watching the
// whole cluster or each namespace if cluster is not nil, measures it and
// stops it: each of b.N iterations idles 10 seconds.
func runIdle(b *testing.B, d *driver.Driver, sent, open func() int64, cluster *bool) idle {
	before := heap()
	var opts []reconciler.Option
	if cluster != nil {
		opts = append(opts, reconciler.WithClusterWatch(*cluster))
	}
	rec := newReconciler(b, d, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	for !rec.Synced() {
		if time.Since(start) > 10*time.Minute {
			b.Fatal("the caches did not sync in 10 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	m := idle{synced: time.Since(start), held: heap() - before}
	const period = 10 * time.Second
	b.ResetTimer()
	var requests int64
	for i := 0; i < b.N; i++ {
		from := sent()
		time.Sleep(period) // the measurement is what an idle reconciler sends
		requests += sent() - from
	}
	b.StopTimer()
	m.perMinute = float64(requests) / float64(b.N) * float64(time.Minute/period)
	if open != nil {
		m.watches = open()
	}
	return m
}

// watchCounter counts the requests through a transport and the watches
// open on it.
type watchCounter struct{ requests, open atomic.Int64 }

func (w *watchCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		w.requests.Add(1)
		resp, err := rt.RoundTrip(req)
		if err != nil || !watching(req.URL.Query()) {
			return resp, err
		}
		w.open.Add(1)
		resp.Body = &closeCounter{ReadCloser: resp.Body, open: &w.open}
		return resp, nil
	})
}

type closeCounter struct {
	io.ReadCloser
	once sync.Once
	open *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.ReadCloser.Close()
}

// scaleRig creates n namespaces, each with its fence and perNamespace
// running sandboxes of gateway gw admitted under it, straight through
// the clientsets; no controller runs, so their status stays empty, which
// the reconciler leaves alone.
func scaleRig(b testing.TB, gw string, n, perNamespace int) (*rest.Config, []string) {
	b.Helper()
	cfg := rig.Config(b)
	cfg.QPS, cfg.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	namespaces := make([]string, n)
	each(b, n, func(i int) error {
		ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-"}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		namespaces[i] = ns.Name
		np, err := kube.NetworkingV1().NetworkPolicies(ns.Name).Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: rig.FenceName, Labels: map[string]string{driver.LabelManagedBy: rig.DriverName}},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		for j := 0; j < perNamespace; j++ {
			s := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{
				Name:   fmt.Sprintf("sb-%d", j),
				Labels: map[string]string{driver.LabelManagedBy: rig.DriverName, driver.LabelGateway: gw},
				Annotations: map[string]string{
					rig.AnnFenceUID: string(np.UID),
					rig.AnnFenceGen: strconv.FormatInt(np.Generation, 10),
				},
			}}
			s.Spec.PodTemplate = rig.AgentPod
			if _, err := cs.AgentsV1beta1().Sandboxes(ns.Name).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	return cfg, namespaces
}

// each runs f for 0..n-1 on 32 goroutines and fails b with the first
// error.
func each(b testing.TB, n int, f func(i int) error) {
	var wg sync.WaitGroup
	var failed firstError
	var next atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

// gateway names the gateway of a rig of n namespaces: a cluster-wide watch
// of one rig sees no other rig's sandboxes.
func gateway(n int) string { return fmt.Sprintf("gw-%d", n) }

// firstError keeps the first error stored in it. An atomic.Value would
// panic on a second error of another type.
type firstError struct{ p atomic.Pointer[error] }

func (f *firstError) Store(err error) { f.p.CompareAndSwap(nil, &err) }

func (f *firstError) Load() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}
