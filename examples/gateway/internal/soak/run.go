package soak

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/internal/kubetest"
	"github.com/kubewire/kubewire/internal/sandboxtest"
)

// Config is a soak run.
type Config struct {
	Seed     int64
	Duration time.Duration
	Clients  int
	// Sandboxes is how many sandboxes each client owns.
	Sandboxes int
	// Rates of each fault, per minute, by the Fault* names (the restart
	// is Restart's).
	Rates map[string]float64
	// Restart restarts kube-apiserver once, in the middle of the run.
	Restart bool
	// LBIdle is the idle time after which the load balancer in front of
	// the API server drops a flow.
	LBIdle time.Duration
	// StallFor is how long a stall lasts.
	StallFor time.Duration
	// FenceChanges per minute.
	FenceChanges float64
	// OpTimeout bounds each client operation.
	OpTimeout time.Duration
	// Kinds are the operations the clients choose from (default: all but
	// fence changes, which FenceChanges sets).
	Kinds []Kind
	// Tolerance of growth between the snapshots.
	Tolerance Tolerance
	// Out is the directory for the history, the audit log and the report;
	// empty: a temporary directory of the test.
	Out string
}

// DefaultConfig is the soak `make test` runs: 30 seconds, a fixed seed,
// every fault.
func DefaultConfig() Config {
	return Config{
		Seed:      13,
		Duration:  30 * time.Second,
		Clients:   4,
		Sandboxes: 3,
		Rates: map[string]float64{
			FaultResetBefore: 6, FaultResetAfter: 6, FaultCloseOnReuse: 6,
			FaultIdleDrop: 4, FaultStall: 4, FaultBlackHole: 2,
		},
		Restart:      true,
		LBIdle:       time.Second,
		StallFor:     time.Second,
		FenceChanges: 6,
		OpTimeout:    20 * time.Second,
		Kinds:        []Kind{Create, Stop, Start, Delete, Get},
		// A run's heap grows about 2 MiB as caches fill, whether it lasts
		// 30 seconds or 10 minutes.
		Tolerance: Tolerance{Goroutines: 10, FDs: 6, HeapBytes: 8 << 20},
	}
}

// RegisterFlags registers c's fields as flags named soak.*, their defaults
// c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.Seed, "soak.seed", c.Seed, "seed of the fault plan and the clients' choices")
	fs.DurationVar(&c.Duration, "soak.duration", c.Duration, "how long the clients run")
	fs.IntVar(&c.Clients, "soak.clients", c.Clients, "concurrent clients of the gateway")
	fs.IntVar(&c.Sandboxes, "soak.sandboxes", c.Sandboxes, "sandboxes each client owns")
	for _, name := range faultNames[:len(faultNames)-1] {
		rate := c.Rates[name]
		c.Rates[name] = rate
		fs.Func("soak."+name, fmt.Sprintf("%s faults a minute (default %g)", name, rate), func(s string) error {
			var v float64
			if _, err := fmt.Sscan(s, &v); err != nil || v < 0 {
				return fmt.Errorf("want a rate a minute, >= 0: %q", s)
			}
			c.Rates[name] = v
			return nil
		})
	}
	fs.BoolVar(&c.Restart, "soak.restart", c.Restart, "restart kube-apiserver in the middle of the run")
	fs.DurationVar(&c.LBIdle, "soak.lb-idle", c.LBIdle, "idle time after which the load balancer drops a flow")
	fs.DurationVar(&c.StallFor, "soak.stall-for", c.StallFor, "how long a stall lasts")
	fs.Float64Var(&c.FenceChanges, "soak.fence-changes", c.FenceChanges, "fence changes a minute")
	fs.StringVar(&c.Out, "soak.out", c.Out, "directory for the history, the audit log and the report (default: a temporary one)")
}

// Gateway starts the gateway under test against cfg, which reaches the
// API server through the fault proxy as the gateway's own user, with
// [Stamp] installed: the driver, its reconciler (running until stop) and
// its HTTP API. The soak serves the handler behind [Handler].
type Gateway func(t testing.TB, cfg *rest.Config, namespace string) (h http.Handler, stop func())

// GatewayUser is the API server user the gateway runs as.
const GatewayUser = "kubewire-gateway"

// Report is a run and its verdict.
type Report struct {
	Seed         int64              `json:"seed"`
	Duration     time.Duration      `json:"duration"`
	Clients      int                `json:"clients"`
	Sandboxes    int                `json:"sandboxesPerClient"`
	Rates        map[string]float64 `json:"ratesPerMinute"`
	Restart      bool               `json:"restart"`
	LBIdle       time.Duration      `json:"lbIdle"`
	StallFor     time.Duration      `json:"stallFor"`
	FenceChanges float64            `json:"fenceChangesPerMinute"`
	Armed        map[string]int     `json:"faultsArmed"`
	Acted        map[string]int     `json:"faultsActed"`
	Wall         time.Duration      `json:"wall"`
	Result       *Result            `json:"result"`
	// Start and End are taken with the gateway up, before the clients
	// start and after they stopped and the sandboxes converged; Before
	// and After, before the gateway was built and after it was stopped.
	Start     Snapshot  `json:"start"`
	End       Snapshot  `json:"end"`
	Before    Snapshot  `json:"before"`
	After     Snapshot  `json:"after"`
	Tolerance Tolerance `json:"tolerance"`
	Leaks     []string  `json:"leaks,omitempty"`
	Errors    []string  `json:"errors,omitempty"`
	Dir       string    `json:"dir"`
}

// Failed reports whether the run broke a rule that must hold.
func (r *Report) Failed() bool { return r.Result.Failed() || len(r.Leaks) > 0 || len(r.Errors) > 0 }

// Run runs a soak of gw: a kube-apiserver and etcd with an audit log, the
// agent-sandbox controller and a fake kubelet, the fault proxy in front of
// the API server, the gateway behind it, the clients and the fence
// changes for c.Duration under the planned faults; then it lets the
// sandboxes converge, reads their final state, stops the gateway and
// checks. It logs the report's table and JSON; the caller judges it. It
// needs KUBEBUILDER_ASSETS: without it the test is skipped, and if the
// API server does not start it fails, as [kubetest.Env.Config] does.
func Run(t testing.TB, c Config, gw Gateway) *Report {
	t.Helper()
	wall := time.Now()
	dir := c.Out
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(AuditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(auditLog)
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		t.Fatal(err)
	}
	apiLog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = apiLog.Close() })
	env := kubetest.StartWith(kubetest.Options{CRDPaths: []string{crd}, APIServerOutput: apiLog, APIServerArgs: map[string]string{
		"audit-policy-file": policy,
		"audit-log-path":    auditLog,
		// Megabytes before the log rotates: never, in a soak.
		"audit-log-maxsize": "100000",
		// A restart as a production API server behind a load balancer
		// does it: new requests get 429 with Retry-After while those in
		// flight drain, then connections close within 2s. Without it the
		// server waits its 60s request timeout for open watches to end.
		"shutdown-send-retry-after": "true",
	}})
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin := env.Config(t)
	admin.Wrap(Stamp)
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "soak-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	sandboxtest.RunController(t, admin, ns)
	kubetest.RunKubelet(t, admin, ns)

	user, err := env.AddUser(GatewayUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	gwcfg, proxy := kubetest.Proxied(t, user)
	gwcfg.Wrap(Stamp)

	rep := &Report{Seed: c.Seed, Duration: c.Duration, Clients: c.Clients, Sandboxes: c.Sandboxes, Rates: c.Rates, Restart: c.Restart,
		LBIdle: c.LBIdle, StallFor: c.StallFor, FenceChanges: c.FenceChanges, Tolerance: c.Tolerance, Dir: dir}
	t.Logf("soak: seed %d, %v, %d clients x %d sandboxes, namespace %s, artifacts in %s", c.Seed, c.Duration, c.Clients, c.Sandboxes, ns, dir)

	rep.Before = steady()
	dumpGoroutines(filepath.Join(dir, "goroutines-before.txt"))
	h, stopGateway := gw(t, gwcfg, ns)
	srv := httptest.NewServer(Handler(h))
	gatewayUp := true
	shutdown := func() {
		if gatewayUp {
			gatewayUp = false
			srv.Close()
			stopGateway()
		}
	}
	defer shutdown()
	clientTransport := &http.Transport{}
	defer clientTransport.CloseIdleConnections()

	historyFile, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer historyFile.Close()
	rec := NewRecorder(historyFile)
	quiet := &sync.RWMutex{}
	w := &workload{
		url: srv.URL, namespace: ns, http: &http.Client{Transport: clientTransport}, rec: rec, quiet: quiet,
		timeout: c.OpTimeout, kinds: c.Kinds,
		template: `{"spec":{"containers":[{"name":"agent","image":"busybox"}]}}`,
	}
	inj := newInjector(proxy, env.RestartAPIServer, quiet, c.LBIdle, c.StallFor, time.Second)
	faults := plan(c.Seed, c.Duration, c.Rates, c.Restart)
	t.Logf("soak: %d faults planned", len(faults))

	rep.Start = TakeSnapshot()
	runCtx, stopRun := context.WithTimeout(ctx, c.Duration)
	defer stopRun()
	var wg sync.WaitGroup
	begin := time.Now()
	wg.Go(func() { inj.run(runCtx, begin, faults) })
	for i := range c.Clients {
		wg.Go(func() { w.client(runCtx, i, c.Seed, c.Sandboxes) })
	}
	wg.Go(func() { w.fencer(runCtx, cs, c.Seed, c.FenceChanges) })
	wg.Wait()
	inj.stop()
	clientTransport.CloseIdleConnections()

	fences := cs.NetworkingV1().NetworkPolicies(ns)
	sandboxes, err := versioned.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	final, finalFence, err := converge(ctx, sandboxes, fences.Get, ns, time.Minute)
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	// Connections of clients that just finished, or of a gateway connection
	// a black hole still holds until its health check drops it, take a
	// moment to go: a leak is what stays.
	rep.End = Settle(rep.Start, c.Tolerance, 10*time.Second)
	shutdown()
	rep.After = Settle(rep.Before, c.Tolerance, 10*time.Second)
	dumpGoroutines(filepath.Join(dir, "goroutines-after.txt"))
	for _, g := range rep.Start.Growth(rep.End, c.Tolerance) {
		rep.Leaks = append(rep.Leaks, "while the gateway ran: "+g)
	}
	for _, g := range rep.Before.Growth(rep.After, c.Tolerance) {
		rep.Leaks = append(rep.Leaks, "over the gateway's lifetime: "+g)
	}

	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	inj.mu.Lock()
	rep.Armed, rep.Acted = inj.armed, inj.acted
	windows := slices.Clone(inj.windows)
	for _, err := range inj.errs {
		rep.Errors = append(rep.Errors, err.Error())
	}
	inj.mu.Unlock()

	history, err := readFile(filepath.Join(dir, "history.jsonl"), ReadHistory)
	if err != nil {
		t.Fatal(err)
	}
	events, err := readFile(auditLog, ReadAudit)
	if err != nil {
		t.Fatal(err)
	}
	rep.Result = Check(Input{History: history, Audit: events, GatewayUser: GatewayUser, Namespace: ns, Final: final, FinalFence: finalFence, Faults: windows})
	rep.Wall = time.Since(wall)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak report:\n%s\n%s", rep.Table(), b)
	return rep
}

func readFile[T any](path string, read func(r io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f)
}

// converge waits until no sandbox runs outside the live fence, and returns
// the sandboxes and the fence then.
func converge(ctx context.Context, cs versioned.Interface, getFence func(context.Context, string, metav1.GetOptions) (*networkingv1.NetworkPolicy, error), ns string, timeout time.Duration) (map[string]State, State, error) {
	deadline := time.Now().Add(timeout)
	for {
		final, fence, stale, err := read(ctx, cs, getFence, ns)
		if err == nil && stale == "" {
			return final, fence, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not converged after %v: %s", timeout, stale)
			}
			return final, fence, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func read(ctx context.Context, cs versioned.Interface, getFence func(context.Context, string, metav1.GetOptions) (*networkingv1.NetworkPolicy, error), ns string) (map[string]State, State, string, error) {
	np, err := getFence(ctx, driver.DefaultFenceName, metav1.GetOptions{})
	if err != nil {
		return nil, State{}, "", err
	}
	fence := State{FenceUID: string(np.UID), FenceGeneration: np.Generation}
	list, err := cs.AgentsV1beta1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fence, "", err
	}
	final := map[string]State{}
	stale := ""
	for _, s := range list.Items {
		s.Kind = "Sandbox" // listed items carry no kind
		o, err := json.Marshal(s)
		if err != nil {
			return nil, fence, "", err
		}
		obj, err := readObject(o)
		if err != nil {
			return nil, fence, "", err
		}
		st := obj.state()
		final[s.Name] = st
		if st.Running && (st.FenceUID != fence.FenceUID || st.FenceGeneration != fence.FenceGeneration) {
			stale = fmt.Sprintf("%s %s, fence generation %d", s.Name, st, fence.FenceGeneration)
		}
	}
	return final, fence, stale, nil
}
