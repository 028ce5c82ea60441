package kubeadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/test/kubetest"
)

// The operations of the side-by-side workload, in the order each worker
// loops over them.
const (
	opGet = iota
	opPatch
	opCreate
	nOps
)

var opNames = [nOps]string{"GET", "PATCH", "POST"}

// opOf is the operation of an attempt, by method: each client of
// TestHASideBySide sends nothing else.
func opOf(method string) int {
	switch method {
	case http.MethodGet:
		return opGet
	case http.MethodPatch:
		return opPatch
	case http.MethodPost:
		return opCreate
	}
	return -1
}

// Causes of a failed operation, as TestHASideBySide tells them apart.
const (
	causeGoaway = iota
	causeUnavailable
	causeConnLoss
	causeDeadline
	causeOther
	nCauses
)

var causeNames = [nCauses]string{"GOAWAY", "429 / unavailable", "connection loss", "deadline", "other"}

// cause classifies the error of an operation. The GOAWAY and connection
// texts are the only way: net/http's bundled HTTP/2 (Go 1.26) and its
// internal package (Go 1.27) export no error type, and kubewire's error
// hides syscall.Errno from errors.As. The upstream texts are
// "http2: server sent GOAWAY and closed the connection; LastStreamID=..."
// and "http2: Transport received Server's graceful shutdown GOAWAY";
// "connection refused" and "connection reset by peer" are syscall's.
func cause(err error) int {
	s := err.Error()
	switch {
	case strings.Contains(s, "GOAWAY"):
		return causeGoaway
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		strings.Contains(s, "the server is currently unable"):
		return causeUnavailable
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(s, "connection refused"), strings.Contains(s, "connection reset"),
		strings.Contains(s, "EOF"):
		return causeConnLoss
	case errors.Is(err, context.DeadlineExceeded), strings.Contains(s, "timeout"),
		strings.Contains(s, "deadline"):
		return causeDeadline
	}
	return causeOther
}

// requestCounter counts the requests that reach it, by operation, and
// the answers 429 Too Many Requests.
type requestCounter struct {
	next     http.RoundTripper
	n        *[nOps]atomic.Int64
	answered *atomic.Int64
}

func (c *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if op := opOf(req.Method); op >= 0 {
		c.n[op].Add(1)
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.answered.Add(1)
	}
	return resp, err
}

func (c *requestCounter) WrappedRoundTripper() http.RoundTripper { return c.next }

func (c *requestCounter) CloseIdleConnections() { utilnet.CloseIdleConnectionsFor(c.next) }

// side is one client of a side-by-side run and what its workload saw.
type side struct {
	name      string
	hc        *http.Client
	cs        kubernetes.Interface
	requests  [nOps]atomic.Int64
	status429 atomic.Int64

	mu       sync.Mutex
	latency  [nOps][]time.Duration
	failures [nOps][nCauses]int
	errs     [nCauses][]string // the first few texts of each cause
	acked    map[string]bool   // the op labels of acknowledged creates
	failed   map[string]bool   // those of creates that failed
}

func (s *side) record(op int, took time.Duration, err error, opLabel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency[op] = append(s.latency[op], took)
	if err != nil {
		c := cause(err)
		s.failures[op][c]++
		if len(s.errs[c]) < 5 {
			s.errs[c] = append(s.errs[c], opNames[op]+": "+err.Error())
		}
	}
	if op == opCreate {
		if err == nil {
			s.acked[opLabel] = true
		} else {
			s.failed[opLabel] = true
		}
	}
}

// ops is the number of operations of each kind and in all.
func (s *side) ops() (each [nOps]int, all int) {
	for op := range each {
		each[op] = len(s.latency[op])
		all += each[op]
	}
	return each, all
}

func (s *side) failuresBy(c int) int {
	n := 0
	for op := range s.failures {
		n += s.failures[op][c]
	}
	return n
}

// creates is what the list of s's ConfigMaps says of its creates.
type creates struct {
	listed, acked int
	maybe         int // failed, but applied: the client cannot know
	duplicated    int // copies beyond one of a create
	missing       int // acknowledged but not listed
}

func (s *side) creates(items []corev1.ConfigMap) creates {
	byOp := map[string]int{}
	for _, cm := range items {
		byOp[cm.Labels["op"]]++
	}
	c := creates{listed: len(items), acked: len(s.acked)}
	for op, n := range byOp {
		c.duplicated += n - 1
		if s.failed[op] {
			c.maybe++
		}
	}
	for op := range s.acked {
		if byOp[op] == 0 {
			c.missing++
		}
	}
	return c
}

// percentiles are the p50, p99 and maximum of d, which it sorts.
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	slices.Sort(d)
	at := func(p int) time.Duration { return d[min(len(d)-1, len(d)*p/100)] }
	ms := func(v time.Duration) string { return fmt.Sprintf("%.1f", float64(v)/float64(time.Millisecond)) }
	return ms(at(50)) + " / " + ms(at(99)) + " / " + ms(d[len(d)-1])
}

// TestHASideBySide runs one workload through stock client-go and through
// kubewire (kubeadapter.Apply), side by side, against two kube-apiservers
// behind a load balancer that restart gracefully one after the other, as
// an upgrade of an HA control plane does, with --goaway-chance moving
// clients between them. Four workers per client loop over a GET, a merge
// patch and a create of ConfigMaps. It logs a table of both clients'
// failures by cause, latency, requests per operation (every attempt, the
// client's own retries included) and creates, and asserts that kubewire
// failed no operation and duplicated no create; stock client-go's numbers
// are logged only.
func TestHASideBySide(t *testing.T) {
	started := time.Now()
	e := kubetest.StartWith(kubetest.Options{
		Replicas:     2,
		GoawayChance: 0.02,
		// The shortest interval that keeps the restart's shape (each
		// replica marked out before it stops serving) keeps the test
		// short: a graceful stop then takes 1.75s plus the drain, not 4s.
		HealthCheckInterval: 250 * time.Millisecond,
	})
	stopAtEnd(t, e, "the HA control plane")
	t.Logf("started 2 replicas in %v", time.Since(started).Round(time.Millisecond))
	run := sideBySide(t, e, "rolling restart", func() error { return e.RollingRestart(kubetest.Graceful) })
	run.assertKubewireClean(t, "a graceful restart")
}

// TestRestartSideBySide: the same workload while the one API server of a
// cluster restarts on its address: for a few seconds every connection is
// refused. kubewire sends a request that reached no server again until
// the operation's deadline, whatever its verb, so no operation fails and
// no create runs twice; stock client-go does not retry a refused
// connection. Before kubewire rode out refused connections until the
// deadline, its three quick attempts lasted about 0.3s and it failed an
// operation for each request the gap caught.
func TestRestartSideBySide(t *testing.T) {
	started := time.Now()
	e := kubetest.StartWith(kubetest.Options{})
	stopAtEnd(t, e, "the API server")
	t.Logf("started in %v", time.Since(started).Round(time.Millisecond))
	run := sideBySide(t, e, "restart", e.RestartAPIServer)
	run.assertKubewireClean(t, "a restart shorter than the deadline")
}

// TestKillSideBySide: the same workload while one of two replicas is
// killed (SIGKILL, as a lost node) and started again. The kill cuts every
// request in flight on the replica's connections, and the balancer sends
// it new connections, which it resets, until its health check marks it
// out. Each client keeps one HTTP/2 connection, moved by GOAWAY, so which
// client's connection the kill cuts is a coin's throw per run: the table
// of one run compares little, and docs/soak.md sums several. What the test
// holds kubewire to: it failed no read, duplicated and lost no create, and
// every operation it failed was a write in flight on a connection the kill
// cut, which it may not send again (the server may have applied it), at
// most one per worker. A write that met a reset before its request was
// written (no connection handed over) once failed too, with "not retried:
// the request may have reached the server".
func TestKillSideBySide(t *testing.T) {
	e := kubetest.StartWith(kubetest.Options{Replicas: 2, GoawayChance: 0.02, HealthCheckInterval: 250 * time.Millisecond})
	stopAtEnd(t, e, "the HA control plane")
	run := sideBySide(t, e, "kill and start of one replica", func() error { return e.RestartReplica(0, kubetest.Kill) })
	kw := run.sides[1]
	kw.mu.Lock()
	defer kw.mu.Unlock()
	assert.Positive(t, len(kw.latency[opCreate]), "kubewire's workers ran")
	assert.Zero(t, kw.failures[opGet], "kubewire's GETs that failed, by cause")
	cut := 0
	for _, op := range []int{opPatch, opCreate} {
		for c, n := range kw.failures[op] {
			if c != causeConnLoss {
				assert.Zero(t, n, "kubewire's %ss that failed for %s: %q", opNames[op], causeNames[c], kw.errs[c])
			}
			cut += n
		}
	}
	assert.LessOrEqual(t, cut, sideWorkers, "kubewire's writes that failed: at most those in flight at the kill")
	for _, text := range kw.errs[causeConnLoss] {
		// pooltrace's words for an attempt net/http handed no connection.
		assert.NotContains(t, text, "before a connection was established", "a write kubewire failed that was never sent")
	}
	assert.Zero(t, run.made[kw].duplicated, "creates kubewire duplicated")
	assert.Zero(t, run.made[kw].missing, "creates kubewire had acknowledged that the list lacks")
}

// TestDeadReplicaInBalancer: a replica died and the load balancer, whose
// health check has not run since, still sends it every other new
// connection, which it resets in the TLS handshake. Twenty creates, each
// on a new connection: through kubewire every one succeeds, once, since
// a request that was never written is sent again whatever its verb;
// through stock client-go those that met the dead replica fail (logged).
// kubewire once failed them too, with "not retried: the request may have
// reached the server": the reset alone cannot tell a handshake from a
// request cut on its way.
func TestDeadReplicaInBalancer(t *testing.T) {
	e := kubetest.StartWith(kubetest.Options{
		Replicas:            2,
		HealthCheckInterval: time.Hour,
		// The default delay outlasts the checks that mark a replica out,
		// an hour here; the replica left stops at the end without one.
		ShutdownDelay: time.Millisecond,
	})
	stopAtEnd(t, e, "the HA control plane")
	base := e.Config(t)
	admin, err := kubernetes.NewForConfig(base)
	require.NoError(t, err)
	ns := namespace(t, admin)
	require.NoError(t, e.StopReplica(0, kubetest.Kill))
	const creates = 20
	for _, s := range []*side{newSide(t, base, "stock", false), newSide(t, base, "kubewire", true)} {
		before := e.Balancer().Replicas[0].DialErrors
		failed := 0
		for i := range creates {
			utilnet.CloseIdleConnectionsFor(s.hc.Transport)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			_, err := s.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				GenerateName: s.name + "-", Labels: map[string]string{"client": s.name, "op": fmt.Sprint(i)}}}, metav1.CreateOptions{})
			cancel()
			if err != nil {
				failed++
				if s.name == "kubewire" || failed == 1 {
					t.Logf("%s, create %d: %v", s.name, i, err)
				}
			}
		}
		resets := e.Balancer().Replicas[0].DialErrors - before
		list, err := admin.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "client=" + s.name})
		require.NoError(t, err)
		t.Logf("%s: %d of %d creates failed; %d connections reset by the balancer for the dead replica; %d listed", s.name, failed, creates, resets, len(list.Items))
		require.Positive(t, resets, "%s: no connection met the dead replica", s.name)
		if s.name == "kubewire" {
			assert.Zero(t, failed, "creates kubewire failed")
			assert.Len(t, list.Items, creates, "creates listed, each once")
		}
	}
}

// stopAtEnd stops e when the test ends and logs how long it took.
func stopAtEnd(t *testing.T, e *kubetest.Env, what string) {
	t.Cleanup(func() {
		began := time.Now()
		assert.NoError(t, e.Stop(), what)
		t.Logf("stopped in %v", time.Since(began).Round(time.Millisecond))
	})
}

// sideBySideRun is what one run of the workload did through each client.
type sideBySideRun struct {
	sides []*side // stock client-go, then kubewire
	made  map[*side]creates
}

// sideBySide runs the workload through stock client-go and kubewire on
// e, with disrupt (named what in the log) in the middle of it, and logs
// the table of what each client saw.
func sideBySide(t *testing.T, e *kubetest.Env, what string, disrupt func() error) *sideBySideRun {
	base := e.Config(t)
	base.QPS, base.Burst = 200, 400
	admin, err := kubernetes.NewForConfig(base)
	require.NoError(t, err)
	ns := namespace(t, admin)
	run := &sideBySideRun{sides: []*side{newSide(t, base, "stock", false), newSide(t, base, "kubewire", true)}, made: map[*side]creates{}}

	const workers = sideWorkers
	ctx := context.Background()
	for _, s := range run.sides {
		for w := range workers {
			_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d", s.name, w)}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, s := range run.sides {
		for w := range workers {
			wg.Go(func() { s.work(ns, w, &stop) })
		}
	}

	// A couple of seconds of steady load before and after the disruption.
	const settle = 2 * time.Second
	lb := e.Balancer()
	began := time.Now()
	<-time.After(settle)
	disrupting := time.Now()
	disruptErr := disrupt()
	took := time.Since(disrupting)
	<-time.After(settle)
	stop.Store(true)
	wg.Wait()
	all := time.Since(began)
	require.NoError(t, disruptErr, "the %s", what)

	for _, s := range run.sides {
		list, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "client=" + s.name})
		require.NoError(t, err)
		s.mu.Lock()
		run.made[s] = s.creates(list.Items)
		s.mu.Unlock()
	}
	var conns int64
	for i, r := range e.Balancer().Replicas {
		conns += r.Conns - lb.Replicas[i].Conns
	}
	head := fmt.Sprintf("%d workers per client, QPS 200, %v per operation; %s in %v of a %v run",
		workers, opTimeout, what, took.Round(time.Millisecond), all.Round(time.Millisecond))
	if len(lb.Replicas) > 0 {
		head += fmt.Sprintf("; %d new connections through the load balancer", conns)
	}
	t.Logf("\n%s\n\n%s", head, run.table())
	for _, s := range run.sides {
		for c := range nCauses {
			for _, text := range s.errs[c] {
				t.Logf("%s, %s: %s", s.name, causeNames[c], text)
			}
		}
	}
	return run
}

// sideWorkers is how many workers each client of a side-by-side run has.
const sideWorkers = 4

// opTimeout is each operation's deadline, as a controller's or a
// handler's call has one: kubewire rides out requests that reached no
// server only until it. 15s covers a 429's Retry-After of 5s and the retry
// after it, and ends an operation stuck on a replica that is gone well
// within the run.
const opTimeout = 15 * time.Second

// newSide builds one client of the run from base. Each client gets a pool
// of its own (a config with a dialer is not shared through client-go's
// transport cache), so that the two meet the disruption on connections of
// their own.
func newSide(t *testing.T, base *rest.Config, name string, kubewire bool) *side {
	s := &side{name: name, acked: map[string]bool{}, failed: map[string]bool{}}
	cfg := rest.CopyConfig(base)
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	count := func(rt http.RoundTripper) http.RoundTripper {
		return &requestCounter{next: rt, n: &s.requests, answered: &s.status429}
	}
	if kubewire {
		require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithTimeout(10*time.Second),
			kubeadapter.WithStackOptions(stack.WithAttemptMiddleware(count))))
	} else {
		// Right above the base transport: every request client-go
		// sends, its own retries included.
		cfg.Wrap(count)
	}
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	s.hc = hc
	s.cs, err = kubernetes.NewForConfigAndClient(cfg, hc)
	require.NoError(t, err)
	return s
}

// work is worker w of s: a GET of its ConfigMap, a merge PATCH of it and
// a create with generateName, each labelled, in a loop until stop.
func (s *side) work(ns string, w int, stop *atomic.Bool) {
	cms := s.cs.CoreV1().ConfigMaps(ns)
	name := fmt.Sprintf("%s-%d", s.name, w)
	for i := 0; !stop.Load(); i++ {
		for op := range nOps {
			opLabel := fmt.Sprintf("%d-%d", w, i)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			began := time.Now()
			var err error
			switch op {
			case opGet:
				_, err = cms.Get(ctx, name, metav1.GetOptions{})
			case opPatch:
				_, err = cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"i":"%d"}}`, i), metav1.PatchOptions{})
			case opCreate:
				_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					GenerateName: name + "-",
					Labels:       map[string]string{"client": s.name, "worker": fmt.Sprint(w), "op": opLabel},
				}}, metav1.CreateOptions{})
			}
			s.record(op, time.Since(began), err, opLabel)
			cancel()
		}
	}
}

// table is the run's side-by-side table, in Markdown.
func (r *sideBySideRun) table() string {
	var rows [][]string
	row := func(name string, f func(s *side) string) {
		cells := []string{name}
		for _, s := range r.sides {
			s.mu.Lock()
			cells = append(cells, f(s))
			s.mu.Unlock()
		}
		rows = append(rows, cells)
	}
	row("operations (GET / PATCH / POST)", func(s *side) string {
		each, all := s.ops()
		return fmt.Sprintf("%d (%d / %d / %d)", all, each[opGet], each[opPatch], each[opCreate])
	})
	row("failed operations", func(s *side) string {
		n := 0
		for c := range nCauses {
			n += s.failuresBy(c)
		}
		return fmt.Sprint(n)
	})
	for c := range nCauses {
		row("&nbsp;&nbsp;"+causeNames[c], func(s *side) string { return fmt.Sprint(s.failuresBy(c)) })
	}
	for op := range nOps {
		row(opNames[op]+" latency p50 / p99 / max (ms)", func(s *side) string { return percentiles(s.latency[op]) })
	}
	row("requests per operation (GET / PATCH / POST)", func(s *side) string {
		each, _ := s.ops()
		per := make([]string, nOps)
		for op := range nOps {
			per[op] = fmt.Sprintf("%.3f", float64(s.requests[op].Load())/float64(max(1, each[op])))
		}
		return strings.Join(per, " / ")
	})
	row("answers 429 (client-go waits and retries)", func(s *side) string { return fmt.Sprint(s.status429.Load()) })
	row("creates acknowledged / listed", func(s *side) string { return fmt.Sprintf("%d / %d", r.made[s].acked, r.made[s].listed) })
	row("&nbsp;&nbsp;failed but applied (maybe)", func(s *side) string { return fmt.Sprint(r.made[s].maybe) })
	row("&nbsp;&nbsp;duplicated", func(s *side) string { return fmt.Sprint(r.made[s].duplicated) })
	row("&nbsp;&nbsp;acknowledged, not listed", func(s *side) string { return fmt.Sprint(r.made[s].missing) })
	var b strings.Builder
	b.WriteString("| | stock client-go | kubewire |\n|---|---:|---:|\n")
	for _, cells := range rows {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// assertKubewireClean asserts that kubewire failed no operation in the
// run and neither duplicated nor lost a create.
func (r *sideBySideRun) assertKubewireClean(t *testing.T, what string) {
	kw := r.sides[1]
	each, all := kw.ops()
	assert.Positive(t, each[opCreate], "kubewire's workers ran")
	for c := range nCauses {
		assert.Zero(t, kw.failuresBy(c), "kubewire's operations failed for %s in %s: %q (of %d operations)", causeNames[c], what, kw.errs[c], all)
	}
	assert.Zero(t, r.made[kw].duplicated, "creates kubewire duplicated")
	assert.Zero(t, r.made[kw].missing, "creates kubewire had acknowledged that the list lacks")
}
