package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	"sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

// BenchmarkFenceChangeCeiling: a fence change over 10,000 running
// sandboxes, suspended by the event-driven reconciler (ns/op: from the
// fence Update to the last sandbox PATCH answered), beside two ceilings,
// with as many workers as the reconciler has by default:
//
//   - raw (raw-ns/op, ceiling-ratio = raw/reconciler): plain client-go
//     sending the same PATCHes from a list taken before the clock starts,
//     the ceiling;
//   - watched (watched-ns/op, watched-ceiling-ratio = watched/reconciler):
//     the same raw PATCHes while a plain client-go informer watches the
//     sandboxes and does nothing else, the ceiling of any event-driven
//     controller, which must watch what it reconciles. watch-cost-ratio is
//     raw/watched: what the watch alone costs on this machine, where the
//     API server, etcd and the client share the cores.
//
// All ratios are over every iteration: 1 is the ceiling. first-patch is
// from the Update returning to the reconciler's first sandbox PATCH
// (below zero if the watch event beat the Update's answer); over 5 runs
// (-benchtime 5x) its p99 is the slowest. The reconciler runs as a user
// gets it: a driver built from a config that leaves QPS and Burst unset,
// as one from a kubeconfig does, and the default options of the driver
// and the reconciler; only the ceilings lift client-go's QPS limit.
// events-written/op and events-dropped/op count the suspensions' Events
// the driver wrote and dropped (over its default event limit);
// event-delay-p50-ms, -p99-ms and -max-ms are from a sandbox's PATCH
// answered to its Event answered. server-cpu-ratio is the CPU the API
// server and etcd spent on the raw PATCHes over what they spent on the
// reconciler's fence change, watched-server-cpu-ratio the same for the
// watched mode (Linux only). One rig serves every iteration:
// between the modes the sandboxes are admitted again, etcd's history is
// compacted (off the clock, so that the API server's own compaction every
// five minutes finds nothing to do instead of landing in one mode's run),
// and the modes take turns going first.
func BenchmarkFenceChangeCeiling(b *testing.B) {
	rg := sharedFenceRig(b, 10000)
	var raw, watched, rec suspension
	var first, delays []time.Duration
	var written, dropped int64
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		var r, w suspension
		var s fenceRun
		modes := []func(){
			func() { r = rg.rawSuspend(b, "raw", nil) },
			func() { w = rg.watchedSuspend(b) },
			func() { s = rg.reconcilerSuspend(b) },
		}
		// The order rotates: each mode goes first, second and third in
		// turn, every three iterations (raw, watched and the reconciler
		// keep that cyclic order). Use a multiple of 3 for -benchtime.
		for k := range modes {
			modes[(i+k)%len(modes)]()
		}
		b.Logf("run %d: raw-patch %s (server CPU %s), watched %s (server CPU %s), reconciler %s (99%% at %s, server CPU %s), fence to first PATCH %s, Events written %d, dropped %d, delay p50 %s, max %s", i+1,
			r.took.Round(time.Millisecond), r.cpu.Round(time.Millisecond), w.took.Round(time.Millisecond), w.cpu.Round(time.Millisecond),
			s.took.Round(time.Millisecond), s.p99.Round(time.Millisecond), s.cpu.Round(time.Millisecond),
			s.first.Round(time.Microsecond), len(s.delays), s.dropped, percentile(s.delays, 0.5).Round(time.Millisecond), percentile(s.delays, 1).Round(time.Millisecond))
		raw.took, raw.cpu = raw.took+r.took, raw.cpu+r.cpu
		watched.took, watched.cpu = watched.took+w.took, watched.cpu+w.cpu
		rec.took, rec.cpu = rec.took+s.took, rec.cpu+s.cpu
		first = append(first, s.first)
		delays = append(delays, s.delays...)
		written += int64(len(s.delays))
		dropped += s.dropped
	}
	b.ReportMetric(float64(raw.took.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(watched.took.Nanoseconds())/float64(b.N), "watched-ns/op")
	b.ReportMetric(float64(raw.took)/float64(rec.took), "ceiling-ratio")
	b.ReportMetric(float64(watched.took)/float64(rec.took), "watched-ceiling-ratio")
	b.ReportMetric(float64(raw.took)/float64(watched.took), "watch-cost-ratio")
	if raw.cpu > 0 && rec.cpu > 0 && watched.cpu > 0 {
		b.ReportMetric(float64(raw.cpu)/float64(rec.cpu), "server-cpu-ratio")
		b.ReportMetric(float64(watched.cpu)/float64(rec.cpu), "watched-server-cpu-ratio")
	}
	b.ReportMetric(ms(percentile(first, 0.50)), "first-patch-p50-ms")
	b.ReportMetric(ms(percentile(first, 0.99)), "first-patch-p99-ms")
	b.ReportMetric(float64(written)/float64(b.N), "events-written/op")
	b.ReportMetric(float64(dropped)/float64(b.N), "events-dropped/op")
	if len(delays) > 0 {
		b.ReportMetric(ms(percentile(delays, 0.50)), "event-delay-p50-ms")
		b.ReportMetric(ms(percentile(delays, 0.99)), "event-delay-p99-ms")
		b.ReportMetric(ms(percentile(delays, 1)), "event-delay-max-ms")
	}
}

// BenchmarkFenceChange: the same fence change, suspended by one polling
// Pass (the -once mode), which lists and then patches one sandbox at a
// time.
func BenchmarkFenceChange(b *testing.B) {
	rg := sharedFenceRig(b, 10000)
	b.Run(fmt.Sprintf("mode=polling-pass/sandboxes=%d", rg.n), func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			rg.admit(b)
			d, err := driver.New(userConfig(rg.cfg), "gw", []string{rg.ns})
			require.NoError(b, err)
			rec := newReconciler(b, d)
			np := rg.nextFence(b)
			b.StartTimer()
			rg.updateFence(b, np)
			stats, err := rec.Pass(context.Background())
			b.StopTimer()
			d.Close()
			require.NoError(b, err)
			rg.running = false
			require.Equal(b, rg.n, stats.Actions)
		}
	})
}

// BenchmarkRawSuspendEvents: the ceiling of a suspension that also
// records one Warning Event with no limit on Events: the raw PATCHes of
// BenchmarkFenceChangeCeiling, each followed by an Event through
// client-go's events broadcaster, which writes each in the background as
// soon as it is recorded. It prices what the driver's Events cost when
// they do not wait. ns/op is from the first PATCH to the last
// answered; raw-ns/op and ceiling-ratio are BenchmarkFenceChangeCeiling's,
// with this in place of the reconciler.
func BenchmarkRawSuspendEvents(b *testing.B) {
	rg := sharedFenceRig(b, 10000)
	scheme := runtime.NewScheme()
	require.NoError(b, sandboxv1beta1.AddToScheme(scheme))
	b.StopTimer()
	var raw, took time.Duration
	for i := 0; i < b.N; i++ {
		raw += rg.rawSuspend(b, "raw", nil).took
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: rg.kube.EventsV1()})
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(b, broadcaster.StartRecordingToSinkWithContext(ctx))
		rec := broadcaster.NewRecorder(scheme, "kubewire-bench")
		took += rg.rawSuspend(b, "events", func(s *sandboxv1beta1.Sandbox) {
			rec.Eventf(s, nil, corev1.EventTypeWarning, "StaleFence", "Suspend", "%s", "namespace workload fence generation changed; suspending stale boundary")
		}).took
		broadcaster.Shutdown()
		cancel()
	}
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(raw)/float64(took), "ceiling-ratio")
}

// BenchmarkRawSuspendWatched: the raw PATCHes of
// BenchmarkFenceChangeCeiling while a plain client-go informer watches the
// same sandboxes, as the reconciler's does, and does nothing else: what
// the watch events of the suspensions cost, apart from the reconciler.
// ns/op is the watched run; raw-ns/op the same PATCHes unwatched, in the
// same iteration; ceiling-ratio and server-cpu-ratio are raw over watched.
func BenchmarkRawSuspendWatched(b *testing.B) {
	rg := sharedFenceRig(b, 10000)
	b.StopTimer()
	var raw, watched suspension
	for i := 0; i < b.N; i++ {
		var r, w suspension
		// The modes take turns going first, as in BenchmarkFenceChangeCeiling.
		if i%2 == 0 {
			r = rg.rawSuspend(b, "raw", nil)
			w = rg.watchedSuspend(b)
		} else {
			w = rg.watchedSuspend(b)
			r = rg.rawSuspend(b, "raw", nil)
		}
		b.Logf("run %d: raw-patch %s (server CPU %s), watched %s (server CPU %s)", i+1,
			r.took.Round(time.Millisecond), r.cpu.Round(time.Millisecond), w.took.Round(time.Millisecond), w.cpu.Round(time.Millisecond))
		raw.took, raw.cpu = raw.took+r.took, raw.cpu+r.cpu
		watched.took, watched.cpu = watched.took+w.took, watched.cpu+w.cpu
	}
	b.ReportMetric(float64(watched.took.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(raw.took.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(raw.took)/float64(watched.took), "ceiling-ratio")
	if raw.cpu > 0 && watched.cpu > 0 {
		b.ReportMetric(float64(raw.cpu)/float64(watched.cpu), "server-cpu-ratio")
	}
}

// watchedSuspend is rawSuspend while a plain informer watches the
// sandboxes, started (and synced) after they were admitted, off the clock.
func (rg *fenceRig) watchedSuspend(b *testing.B) suspension {
	b.Helper()
	rg.admit(b)
	stop := rg.watch(b)
	defer stop()
	return rg.rawSuspend(b, "watched", nil)
}

// watch runs a plain Sandbox informer over the rig's namespace until the
// returned function is called; it returns once the informer has synced.
func (rg *fenceRig) watch(b *testing.B) (stop func()) {
	b.Helper()
	f := externalversions.NewSharedInformerFactoryWithOptions(rg.cs, 0, externalversions.WithNamespace(rg.ns))
	inf := f.Agents().V1beta1().Sandboxes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	require.True(b, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "the informer never synced")
	return func() {
		cancel()
		f.Shutdown()
	}
}

// userConfig is cfg as a kubeconfig gives it: QPS and Burst unset, which
// is what driver.New sees in a gateway users build.
func userConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 0, 0
	return cfg
}

// fenceRig is n sandboxes of one namespace (benchRig's) and what the
// benchmarks know of them: the fence they are admitted under and whether
// they still run.
type fenceRig struct {
	cfg     *rest.Config
	ns      string
	n       int
	cs      versioned.Interface
	kube    kubernetes.Interface
	fence   fence
	running bool
}

var fenceRigs struct {
	sync.Mutex
	m map[int]*fenceRig
}

// sharedFenceRig builds the rig of n sandboxes once per process: the
// testing package calls a benchmark function again for each b.N it
// tries, and building 10,000 sandboxes takes longer than suspending them.
func sharedFenceRig(b *testing.B, n int) *fenceRig {
	b.Helper()
	fenceRigs.Lock()
	defer fenceRigs.Unlock()
	if rg := fenceRigs.m[n]; rg != nil {
		return rg
	}
	start := time.Now()
	cfg, ns, cs, fence := benchRig(b, n)
	b.Logf("rig: %d sandboxes created in %s", n, time.Since(start).Round(time.Millisecond))
	rg := &fenceRig{cfg: cfg, ns: ns, n: n, cs: cs, kube: mustKube(b, cfg), fence: fence, running: true}
	if fenceRigs.m == nil {
		fenceRigs.m = map[int]*fenceRig{}
	}
	fenceRigs.m[n] = rg
	return rg
}

// admit makes every sandbox run under the current fence again, as the
// driver's Start records it (without a bootstrap, which the reconciler
// would time), by the same raw PATCHes, off the clock. Admitting in place
// rather than building a second set keeps both modes on the same objects.
func (rg *fenceRig) admit(b *testing.B) {
	b.Helper()
	if rg.running {
		return
	}
	refs := rg.list(b)
	require.NoError(b, rg.patchAll(refs, admitWorkers, func(rv string) []byte { return admitBody(rv, rg.fence) }, nil))
	rg.running = true
}

// suspension is one run of the raw PATCHes: from the first sent to the
// last answered, and the CPU the API server and etcd spent meanwhile.
type suspension struct{ took, cpu time.Duration }

// rawSuspend is the ceiling: every sandbox suspended by plain client-go,
// then, if not nil, called with each answer; name names its profiles
// (KUBEWIRE_BENCH_PPROF).
func (rg *fenceRig) rawSuspend(b *testing.B, name string, then func(*sandboxv1beta1.Sandbox)) suspension {
	b.Helper()
	rg.admit(b)
	refs := rg.list(b)
	rg.compact(b)
	cpu0 := serverCPU()
	stop := rg.profile(b, name)
	start := time.Now()
	err := rg.patchAll(refs, defaultWorkers, suspendBody, then)
	took := time.Since(start)
	cpu := serverCPU() - cpu0
	stop()
	require.NoError(b, err)
	rg.running = false
	return suspension{took: took, cpu: cpu}
}

// fenceRun is one fence change the reconciler acted on.
type fenceRun struct {
	// took is from the fence Update to the last sandbox PATCH answered.
	took time.Duration
	// first is from the Update returning to the first PATCH sent.
	first time.Duration
	// cpu is what the API server and etcd spent meanwhile.
	cpu time.Duration
	// delays are, for each suspension's Event written, the time from the
	// sandbox's PATCH answered to the Event answered; dropped counts the
	// Events the driver dropped over its event limit.
	delays  []time.Duration
	dropped int64
	// p99 is from the Update to the 99th percentile of the PATCHes
	// answered: a tail beyond it is a few slow requests, not slow work.
	p99 time.Duration
}

// reconcilerSuspend runs a reconciler over the running sandboxes and
// changes the fence once it is idle. The clock runs from the Update to the
// last answer.
func (rg *fenceRig) reconcilerSuspend(b *testing.B) fenceRun {
	b.Helper()
	rg.admit(b)
	cfg := userConfig(rg.cfg)
	w := newPatchWatch(rg.n)
	cfg.Wrap(w.wrap)
	d, err := driver.New(cfg, "gw", []string{rg.ns})
	require.NoError(b, err)
	defer d.Close()
	var q queueWatch
	var dropped atomic.Int64
	rec := newReconciler(b, d, reconciler.WithQueueMetrics(&q), reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) {
		if e.EventDropped {
			dropped.Add(1)
		}
	}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Run queues every cached sandbox once synced; the fence changes once
	// the workers found them all converged.
	require.Eventually(b, func() bool { return q.idle(rg.n) }, time.Minute, 5*time.Millisecond, "the reconciler never went idle")
	require.Zero(b, w.sent.Load(), "the reconciler patched before the fence changed")
	np := rg.nextFence(b)
	rg.compact(b)
	cpu0 := serverCPU()
	stopProfile := rg.profile(b, "reconciler")
	b.StartTimer()
	start := time.Now()
	rg.updateFence(b, np)
	changed := time.Now()
	select {
	case <-w.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d sandboxes suspended after 5m", w.ok.Load(), rg.n)
	}
	took := time.Since(start)
	b.StopTimer()
	cpu := serverCPU() - cpu0
	stopProfile()
	// Each Event is written at once or dropped: none waits.
	require.Eventually(b, func() bool { return w.eventsOK.Load()+dropped.Load() == int64(rg.n) }, time.Minute, 10*time.Millisecond,
		"Events neither written nor dropped")
	rg.running = false
	require.Zero(b, w.refused.Load(), "sandbox PATCHes refused")
	at, body := w.firstPatch()
	var sent struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	require.NoError(b, json.Unmarshal(body, &sent))
	require.Equal(b, string(suspendBody(sent.Metadata.ResourceVersion)), string(body), "the raw mode sends the reconciler's patch")
	return fenceRun{took: took, first: at.Sub(changed), cpu: cpu, delays: w.eventDelays(), dropped: dropped.Load(), p99: w.answered(start, 0.99)}
}

// compact compacts etcd's history off the clock (rig.CompactEtcd)
// and logs what that took: the cost the API server's own compaction
// would otherwise put into a timed run.
func (rg *fenceRig) compact(b *testing.B) {
	b.Helper()
	cpu0, start := serverCPU(), time.Now()
	rig.CompactEtcd(b)
	b.Logf("etcd compacted off the clock in %s (API server and etcd CPU %s)", time.Since(start).Round(time.Millisecond), (serverCPU() - cpu0).Round(time.Millisecond))
}

// nextFence returns the fence policy with its spec changed, off the clock.
func (rg *fenceRig) nextFence(b *testing.B) *networkingv1.NetworkPolicy {
	b.Helper()
	np, err := rg.kube.NetworkingV1().NetworkPolicies(rg.ns).Get(context.Background(), rig.FenceName, metav1.GetOptions{})
	require.NoError(b, err)
	// At most two policy types: toggle Ingress beside the fence's Egress.
	if len(np.Spec.PolicyTypes) == 1 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	} else {
		np.Spec.PolicyTypes = np.Spec.PolicyTypes[:1]
	}
	return np
}

// updateFence writes np: every sandbox's recorded fence is now stale.
func (rg *fenceRig) updateFence(b *testing.B, np *networkingv1.NetworkPolicy) {
	b.Helper()
	out, err := rg.kube.NetworkingV1().NetworkPolicies(rg.ns).Update(context.Background(), np, metav1.UpdateOptions{})
	require.NoError(b, err)
	require.NotEqual(b, rg.fence.Generation, out.Generation)
	rg.fence = fence{UID: out.UID, Generation: out.Generation}
}

type sandboxRef struct{ name, rv string }

// list reads every sandbox's name and resourceVersion, 500 a page.
func (rg *fenceRig) list(b *testing.B) []sandboxRef {
	b.Helper()
	var refs []sandboxRef
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := rg.cs.AgentsV1beta1().Sandboxes(rg.ns).List(context.Background(), opts)
		require.NoError(b, err)
		for _, s := range l.Items {
			refs = append(refs, sandboxRef{s.Name, s.ResourceVersion})
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	require.Len(b, refs, rg.n)
	return refs
}

// admitWorkers admit faster than the reconciler's workers suspend: the
// admission is off the clock.
const admitWorkers = 32

// patchAll sends body(rv) to every sandbox of refs as a JSON merge patch,
// from workers goroutines, calling then, if not nil, with each answer, and
// returns the first error.
func (rg *fenceRig) patchAll(refs []sandboxRef, workers int, body func(rv string) []byte, then func(*sandboxv1beta1.Sandbox)) error {
	client := rg.cs.AgentsV1beta1().Sandboxes(rg.ns)
	var next atomic.Int64
	var failed firstError
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(refs)) || failed.Load() != nil {
					return
				}
				out, err := client.Patch(context.Background(), refs[i].name, types.MergePatchType, body(refs[i].rv), metav1.PatchOptions{})
				if err != nil {
					failed.Store(err)
					return
				}
				if then != nil {
					then(out)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// defaultWorkers is the reconciler's default of WithWorkers ("Default: 8"):
// the raw mode patches with the concurrency the reconciler gets by default.
const defaultWorkers = 8

// suspendBody is the driver's suspension of a v1beta1 Sandbox, guarded by
// rv: the bytes the reconciler sends, which reconcilerSuspend checks.
func suspendBody(rv string) []byte {
	var p sandboxPatch
	p.Metadata.ResourceVersion = rv
	p.Metadata.Annotations = map[string]*string{rig.AnnBootstrap: nil}
	p.Spec.OperatingMode = "Suspended"
	return mustJSON(p)
}

// admitBody is the driver's Start of a v1beta1 Sandbox under fence,
// guarded by rv, without the bootstrap mark: a bootstrap would be timed by
// the reconciler.
func admitBody(rv string, f fence) []byte {
	uid, gen := string(f.UID), strconv.FormatInt(f.Generation, 10)
	var p sandboxPatch
	p.Metadata.ResourceVersion = rv
	p.Metadata.Annotations = map[string]*string{rig.AnnFenceUID: &uid, rig.AnnFenceGen: &gen}
	p.Spec.OperatingMode = "Running"
	return mustJSON(p)
}

// sandboxPatch is the shape of the driver's guarded merge patch of a
// v1beta1 Sandbox. reconcilerSuspend checks that the reconciler sends
// these very bytes, so a change of the driver's patch fails the benchmark
// instead of comparing it with something else.
type sandboxPatch struct {
	Metadata struct {
		ResourceVersion string             `json:"resourceVersion"`
		Annotations     map[string]*string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		OperatingMode string `json:"operatingMode"`
	} `json:"spec"`
}

// fence is a NetworkPolicy's identity as the driver records it.
type fence struct {
	UID        types.UID
	Generation int64
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// patchWatch watches a driver's sandbox PATCHes: when the first was sent,
// the body of the first, how many were answered 200 (done closes at n) and
// how many were not; and how many Event writes it sent, and how many were
// answered 201.
type patchWatch struct {
	n        int64
	eventsOK atomic.Int64
	sent     atomic.Int64
	ok       atomic.Int64
	refused  atomic.Int64
	done     chan struct{}

	mu        sync.Mutex
	firstAt   time.Time
	firstBody []byte
	patched   map[string]time.Time // when each sandbox's PATCH was answered
	delays    []time.Duration      // from a PATCH answered to its Event answered
}

func newPatchWatch(n int) *patchWatch {
	return &patchWatch{n: int64(n), done: make(chan struct{}), patched: map[string]time.Time{}}
}

func (w *patchWatch) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if strings.HasPrefix(req.URL.Path, "/apis/events.k8s.io/") {
			// client-go sends Events as protobuf: decode them as it does.
			var regarding string
			if o, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(bodyOf(req), nil, nil); err == nil {
				if e, ok := o.(*eventsv1.Event); ok {
					regarding = e.Regarding.Name
				}
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusCreated {
				w.eventsOK.Add(1)
				now := time.Now()
				w.mu.Lock()
				if at, ok := w.patched[regarding]; ok {
					w.delays = append(w.delays, now.Sub(at))
				}
				w.mu.Unlock()
			}
			return resp, err
		}
		if req.Method != http.MethodPatch || !strings.Contains(req.URL.Path, "/sandboxes/") {
			return rt.RoundTrip(req)
		}
		if w.sent.Add(1) == 1 {
			w.keep(time.Now(), req)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				now := time.Now()
				w.mu.Lock()
				w.patched[req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]] = now
				w.mu.Unlock()
				if w.ok.Add(1) == w.n {
					close(w.done)
				}
			} else {
				w.refused.Add(1)
			}
		}
		return resp, err
	})
}

// keep records when the first PATCH was sent, and its body.
func (w *patchWatch) keep(at time.Time, req *http.Request) {
	body := bodyOf(req)
	w.mu.Lock()
	w.firstAt, w.firstBody = at, body
	w.mu.Unlock()
}

// bodyOf copies req's body through GetBody, leaving the request's own
// alone.
func bodyOf(req *http.Request) []byte {
	if req.GetBody == nil {
		return nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer rc.Close()
	body, _ := io.ReadAll(rc)
	return body
}

// eventDelays returns, for each Event written, the time from its
// sandbox's PATCH answered to the Event answered.
func (w *patchWatch) eventDelays() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.delays)
}

// answered returns the time from start to the PATCH answer at quantile q.
func (w *patchWatch) answered(start time.Time, q float64) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d []time.Duration
	for _, at := range w.patched {
		d = append(d, at.Sub(start))
	}
	return percentile(d, q)
}

// firstPatch returns when the first PATCH was sent, and its body.
func (w *patchWatch) firstPatch() (time.Time, []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstAt, bytes.Clone(w.firstBody)
}

// queueWatch is a workqueue.MetricsProvider that tells when the queue is
// idle: every item added has been taken and done.
type queueWatch struct{ adds, depth, done atomic.Int64 }

func (q *queueWatch) idle(n int) bool {
	adds := q.adds.Load()
	return adds >= int64(n) && q.depth.Load() == 0 && q.done.Load() == adds
}

type gauge struct{ v *atomic.Int64 }

func (g gauge) Inc()            { g.v.Add(1) }
func (g gauge) Dec()            { g.v.Add(-1) }
func (g gauge) Observe(float64) { g.v.Add(1) }
func (gauge) Set(float64)       {}

func (q *queueWatch) NewDepthMetric(string) workqueue.GaugeMetric  { return gauge{&q.depth} }
func (q *queueWatch) NewAddsMetric(string) workqueue.CounterMetric { return gauge{&q.adds} }
func (q *queueWatch) NewLatencyMetric(string) workqueue.HistogramMetric {
	return gauge{new(atomic.Int64)}
}

// NewWorkDurationMetric is observed once per item done.
func (q *queueWatch) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return gauge{&q.done}
}

func (q *queueWatch) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return gauge{new(atomic.Int64)}
}

func (q *queueWatch) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return gauge{new(atomic.Int64)}
}

func (q *queueWatch) NewRetriesMetric(string) workqueue.CounterMetric {
	return gauge{new(atomic.Int64)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// serverCPU returns the CPU time, user and system, that this process's
// children (the API server and etcd) have spent, read from /proc in
// clock ticks of 10ms (USER_HZ on Linux); 0 where there is no /proc.
func serverCPU() time.Duration {
	self := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses and may
		// hold spaces: state, ppid, ..., utime (14th of the line), stime.
		end := strings.LastIndexByte(string(stat), ')')
		if end < 0 {
			continue
		}
		f := strings.Fields(string(stat[end+1:]))
		if len(f) < 13 || f[1] != self {
			continue
		}
		for _, v := range f[11:13] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
