package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// startHA starts an HA control plane for one test, as an upgrade of one
// sees it: two kube-apiservers behind a load balancer that checks
// /readyz, with --goaway-chance moving clients between them, and
// agent-sandbox's CRD. It is stopped when the test ends.
func startHA(t testing.TB) *kubetest.Env {
	t.Helper()
	crd, err := sandboxtest.SandboxCRD()
	require.NoError(t, err)
	// Config skips the test without KUBEBUILDER_ASSETS; a control plane
	// that did not start fails it.
	rig.Config(t)
	e := kubetest.StartWith(kubetest.Options{
		CRDPaths:     []string{crd},
		Replicas:     2,
		GoawayChance: 0.02,
		// The shortest interval that keeps a graceful stop's shape (the
		// replica marked out before it stops serving) keeps the test
		// short.
		HealthCheckInterval: 250 * time.Millisecond,
	})
	t.Cleanup(func() { assert.NoError(t, e.Stop(), "the HA control plane") })
	return e
}

// informerRequests records the requests of a driver's informers, at the
// attempt level (below kubeadapter's stack, so every attempt of a retry
// is one): per resource, the lists (a LIST's first page, or a watch that
// sends the initial state, client-go's watch-list) and the watches that
// resume from a resourceVersion, each with its answer.
type informerRequests struct {
	mu   sync.Mutex
	reqs []informerRequest
	// suspended is when each sandbox PATCH was answered 2xx.
	suspended []time.Time
}

type informerRequest struct {
	at       time.Time
	resource string // "sandboxes" or "networkpolicies"
	list     bool   // a LIST, or a watch with the initial state
	watch    bool   // a watch, with the initial state or not
	rv       string // the resourceVersion asked for
	status   int    // 0: a transport error
	err      error
	// Of a watch answered 200: when its body ended, and how (nil for
	// closed by the client).
	body *watchBody
}

// watchBody records how a watch's body ended.
type watchBody struct {
	rc    io.ReadCloser
	mu    sync.Mutex
	bytes int
	head  []byte // the first bytes, for the log
	ended time.Time
	err   error
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.bytes += n
	if len(b.head) < 200 {
		b.head = append(b.head, p[:min(n, 200-len(b.head))]...)
	}
	if err != nil && b.ended.IsZero() {
		b.ended, b.err = time.Now(), err
	}
	b.mu.Unlock()
	return n, err
}

func (b *watchBody) Close() error {
	b.mu.Lock()
	if b.ended.IsZero() {
		b.ended = time.Now()
	}
	b.mu.Unlock()
	return b.rc.Close()
}

func (b *watchBody) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended.IsZero() {
		return fmt.Sprintf("open, %d bytes", b.bytes)
	}
	how := "closed"
	if b.err != nil {
		how = b.err.Error()
	}
	return fmt.Sprintf("ended %s (%s), %d bytes: %q", b.ended.Format("15:04:05.000"), how, b.bytes, b.head)
}

func (r informerRequest) String() string {
	verb := "WATCH"
	switch {
	case r.list && r.watch:
		verb = "WATCH-LIST"
	case r.list:
		verb = "LIST"
	}
	answer := fmt.Sprint(r.status)
	if r.err != nil {
		answer = r.err.Error()
	}
	if r.body != nil {
		answer += ", " + r.body.String()
	}
	return fmt.Sprintf("%s %s %s rv=%q: %s", r.at.Format("15:04:05.000"), verb, r.resource, r.rv, answer)
}

func (ir *informerRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return rig.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/sandboxes/") {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode/100 == 2 {
				ir.mu.Lock()
				ir.suspended = append(ir.suspended, time.Now())
				ir.mu.Unlock()
			}
			return resp, err
		}
		resource := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
		q := req.URL.Query()
		if req.Method != http.MethodGet || (resource != "sandboxes" && resource != "networkpolicies") || q.Get("continue") != "" {
			return rt.RoundTrip(req)
		}
		rec := informerRequest{at: time.Now(), resource: resource, rv: q.Get("resourceVersion"),
			list: !watching(q) || q.Get("sendInitialEvents") == "true", watch: watching(q)}
		resp, err := rt.RoundTrip(req)
		rec.err = err
		if err == nil {
			rec.status = resp.StatusCode
			if watching(q) && resp.StatusCode == http.StatusOK {
				rec.body = &watchBody{rc: resp.Body}
				resp.Body = rec.body
			}
		}
		ir.mu.Lock()
		ir.reqs = append(ir.reqs, rec)
		ir.mu.Unlock()
		return resp, err
	})
}

// since returns the requests recorded from i on, and the count so far.
func (ir *informerRequests) since(i int) ([]informerRequest, int) {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return slices.Clone(ir.reqs[i:]), len(ir.reqs)
}

// patched returns when each sandbox PATCH answered 2xx was answered, and
// forgets them.
func (ir *informerRequests) patched() []time.Time {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	out := ir.suspended
	ir.suspended = nil
	return out
}

// watching reports whether each informer's latest request is a watch the
// API server answered and has kept open for over a second: a watch from a
// resourceVersion the server no longer holds ends at once with 410 Gone.
func (ir *informerRequests) watching() bool {
	reqs, _ := ir.since(0)
	latest := map[string]informerRequest{}
	for _, r := range reqs {
		latest[r.resource] = r
	}
	for _, resource := range []string{"sandboxes", "networkpolicies"} {
		r, ok := latest[resource]
		if !ok || r.body == nil || time.Since(r.at) < time.Second {
			return false
		}
		r.body.mu.Lock()
		ended := !r.body.ended.IsZero()
		r.body.mu.Unlock()
		if ended {
			return false
		}
	}
	return true
}

// count returns, per resource, the lists and the watches among reqs.
func count(reqs []informerRequest) (lists, watches map[string]int) {
	lists, watches = map[string]int{}, map[string]int{}
	for _, r := range reqs {
		if r.list {
			lists[r.resource]++
		} else {
			watches[r.resource]++
		}
	}
	return lists, watches
}

// TestInformersThroughHARestart: the reconciler, as a user runs it (a
// driver from a config with QPS and Burst unset, every default), on an HA
// control plane of two kube-apiservers with --goaway-chance 0.02 and
// agent-sandbox's controller. Through a graceful rolling restart, and
// then the kill of a replica, its informers resume: the fence moved the
// moment each restart ends is acted on (every running sandbox suspended,
// which the reconciler learns of only from the fence informer), a sandbox
// created after each restart is seen (the reconciler clears its bootstrap
// mark, which it learns of only from the Sandbox informer), each informer
// has a watch open again, and the fence moved once more after both
// restarts is acted on. It asserts how often each informer lists per
// restart, and logs its lists and watches, and each fence change's
// latency from its Update to the last suspension answered.
//
// The bounds are client-go's reflector's (tools/cache/reflector.go,
// v0.37.2, where WatchListClient is on by default, so that a list is a
// watch that sends the initial state). A watch that ends quietly (a
// graceful stop, or a connection lost mid-stream) is opened again from
// the last resourceVersion seen, and one refused or answered 429 (a
// stopping replica) is retried after a backoff, with no list. It lists
// again only when a watch ends with an error event, or within a second
// with no event, or a list fails. One error event is routine here: a
// replica that just started holds resourceVersions from its start on, and
// answers a watch from an older one with 410 Gone; the fence, which
// rarely changes, meets it on each replica restarted, and so do the
// sandboxes when their last change is older than the replica (or than
// the window of the survivor's watch cache, which a kill run under load
// showed once). So each informer lists at most once per replica
// restarted; more is a relist storm. That a watch cut by a lost
// connection resumes without a list is TestWatchResumesAfterLostConnection's
// to show, where no 410 can interfere.
func TestInformersThroughHARestart(t *testing.T) {
	e := startHA(t)
	r := rig.New(t, e.Config(t))
	sandboxtest.RunController(t, r.Cfg, r.NS)
	setup := r.Driver(t, nil)
	const n = 5
	names := admitted(t, r, setup, "sb", n)

	var informers informerRequests
	counter := rig.NewWrites()
	cfg := userConfig(r.Cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return informers.wrap(counter.Wrap(rt)) })
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	rec := newReconciler(t, d)
	runReconciler(t, rec)
	require.Eventually(t, rec.Synced, rig.Settle, 10*time.Millisecond)
	waitBootstrapped(t, r, names)

	restarts := []struct {
		name    string
		restart func() error
		lists   map[string]int // at most, by resource
	}{
		{"graceful rolling restart", func() error { return e.RollingRestart(kubetest.Graceful) },
			map[string]int{"sandboxes": 2, "networkpolicies": 2}},
		{"kill of replica 0", func() error { return e.RestartReplica(0, kubetest.Kill) },
			map[string]int{"sandboxes": 1, "networkpolicies": 1}},
	}
	// suspend moves the fence and waits until every running sandbox is
	// suspended, once each; it logs the time from the fence's Update to
	// the last suspension answered.
	suspend := func(when string, running []string) {
		counter.Reset()
		informers.patched()
		moved := moveFence(t, r)
		waitFor(t, setup, r.NS, running, "suspended", suspended)
		counter.Settled(t)
		got := counter.Reset()
		for _, name := range running {
			assert.Equal(t, 1, got[name], "%s: %s suspended once", when, name)
		}
		answered := informers.patched()
		require.Len(t, answered, len(running), "%s: one suspension answered per running sandbox", when)
		var last time.Duration
		for _, at := range answered {
			last = max(last, at.Sub(moved))
		}
		t.Logf("fence moved %s: %d sandboxes suspended, fence Update to the last suspension answered %v",
			when, len(running), last.Round(time.Millisecond))
	}
	running := names
	_, mark := informers.since(0)
	for i, restart := range restarts {
		began := time.Now()
		require.NoError(t, restart.restart(), restart.name)
		took := time.Since(began)
		// The moment the restart is over, while an informer may still be
		// listing again.
		suspend("as the "+restart.name+" ended", running)
		// A sandbox created once the restart is over: only a watch event
		// (or a list) tells the reconciler of it.
		name := fmt.Sprintf("after-%d", i)
		_, err := setup.Create(context.Background(), r.NS, name, rig.AgentPod)
		require.NoError(t, err)
		rig.WaitPhase(t, setup, r.NS, name, driver.PhaseReady)
		waitBootstrapped(t, r, []string{name})
		running = []string{name}
		// The fence informer's watch may be the one that broke and not
		// have come back yet: what it costs belongs to this restart.
		require.Eventually(t, informers.watching, rig.Settle, 10*time.Millisecond,
			"every informer watches again after the %s", restart.name)

		var reqs []informerRequest
		reqs, mark = informers.since(mark)
		lists, watches := count(reqs)
		var lines []string
		for _, r := range reqs {
			lines = append(lines, r.String())
		}
		t.Logf("%s (%v): lists %v, watches %v, balancer %+v\n%s", restart.name, took.Round(time.Millisecond),
			lists, watches, e.Balancer(), strings.Join(lines, "\n"))
		for resource, most := range restart.lists {
			assert.LessOrEqual(t, lists[resource], most, "%s: how often the %s informer lists", restart.name, resource)
		}
	}
	suspend("after both restarts, the informers watching", running)
}

// TestWatchResumesAfterLostConnection: when the connection under the
// reconciler's informers closes (a FIN, as from an API server that
// died), each informer watches again from the resourceVersion it had, and
// lists nothing: the API server holds that resourceVersion. Then a fence
// change is acted on. The driver is a user's (QPS and Burst unset, every
// default). Before kubeadapter handed client-go a cut watch's
// io.ErrUnexpectedEOF as the sentinel itself, each informer's watch ended
// with an error event and both informers listed again.
func TestWatchResumesAfterLostConnection(t *testing.T) {
	r := rig.Current(t)
	setup := r.Driver(t, nil)
	names := admitted(t, r, setup, "sb", 2)
	cfg, proxy := kubetest.Proxied(t, userConfig(r.Cfg))
	var informers informerRequests
	cfg.Wrap(informers.wrap)
	d, err := driver.New(cfg, "gw", []string{r.NS})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	runReconciler(t, newReconciler(t, d))
	waitBootstrapped(t, r, names)
	// client-go's reflector takes a watch that ends within a second of
	// its start with no event for a failure, and lists again: the watches
	// must be older than that when their connection closes.
	<-time.After(1500 * time.Millisecond)
	_, mark := informers.since(0)
	before := proxy.Accepted()

	// The driver's clients share one connection; the next request on it
	// closes it.
	proxy.SetFaultExistingOnce(transporttest.CloseOnSend)
	_, err = d.Get(context.Background(), r.NS, names[0])
	require.NoError(t, err, "the GET is sent again on a new connection")
	require.Greater(t, proxy.Accepted(), before, "a new connection")
	var reqs []informerRequest
	require.Eventually(t, func() bool {
		reqs, _ = informers.since(mark)
		lists, watches := count(reqs)
		return watches["sandboxes"]+lists["sandboxes"] > 0 && watches["networkpolicies"]+lists["networkpolicies"] > 0
	}, rig.Settle, 10*time.Millisecond, "every informer watches or lists again")
	moveFence(t, r)
	waitFor(t, setup, r.NS, names, "suspended", suspended)
	reqs, _ = informers.since(mark)
	lists, _ := count(reqs)
	all, _ := informers.since(0)
	var lines []string
	for _, r := range all {
		lines = append(lines, r.String())
	}
	assert.Empty(t, lists, "no informer lists again\n%s", strings.Join(lines, "\n"))
}
