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

	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// The scenarios of a soak, by the names of -soak.scenario.
const (
	// ScenarioFaults is one kube-apiserver behind the fault proxy, with
	// every connection fault at its rate and a restart in the middle.
	ScenarioFaults = "faults"
	// ScenarioHA is an HA control plane: two kube-apiservers on one etcd
	// behind a load balancer that checks their /readyz, with
	// --goaway-chance=0.02 throughout, a graceful rolling restart of the
	// replicas a third into the run and one replica killed and started
	// again two thirds in ([haPlan]). The connection faults are off, so
	// that every failure is the control plane's, attributable to the
	// restart or the kill whose window it falls in; flags after
	// -soak.scenario can set them again.
	ScenarioHA = "ha"
)

// Config is a soak run.
type Config struct {
	// Scenario is ScenarioFaults (the default, "" too) or ScenarioHA; set
	// it with [Config.UseScenario], which sets the fields it implies.
	Scenario string
	// Replicas of kube-apiserver: over 1, behind a load balancer, with
	// GoawayChance (kube-apiserver's --goaway-chance).
	Replicas     int
	GoawayChance float64
	Seed         int64
	Duration     time.Duration
	Clients      int
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
	// ResendPOST breaks the hop between the gateway and the API server
	// on purpose: it sends every POST twice (see [apiProxy]).
	ResendPOST bool
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
		// The gateway's heap in use, read without a forced collection,
		// grew under 1 MiB in a 30-second run; 8 MiB leaves room for a
		// collection cycle's swing.
		Tolerance: Tolerance{Goroutines: 10, FDs: 6, HeapBytes: 8 << 20},
	}
}

// UseScenario sets c's scenario and the fields it implies: for
// ScenarioHA two replicas, a GOAWAY chance of 0.02, no connection faults
// and no single-server restart; for ScenarioFaults one API server and
// [DefaultConfig]'s faults.
func (c *Config) UseScenario(name string) error {
	d := DefaultConfig()
	switch name {
	case ScenarioFaults:
		c.Replicas, c.GoawayChance, c.Restart = d.Replicas, d.GoawayChance, d.Restart
		for _, f := range rateFaults {
			c.Rates[f] = d.Rates[f]
		}
	case ScenarioHA:
		// The replicas and the GOAWAY chance of TestHASideBySide: the
		// most kube-apiserver allows, to move clients between replicas
		// as often as an HA cluster ever does.
		c.Replicas, c.GoawayChance, c.Restart = 2, 0.02, false
		for _, f := range rateFaults {
			c.Rates[f] = 0
		}
	default:
		return fmt.Errorf("scenario %q: want %s or %s", name, ScenarioFaults, ScenarioHA)
	}
	c.Scenario = name
	return nil
}

// idleDrop is the idle time after which the load balancer in front of
// the API server drops a flow: LBIdle if idle drops are planned at all,
// else 0, none. A rate of 0 turns a fault off, and this one acts without
// being armed, on any flow that happens to go idle.
func (c *Config) idleDrop() time.Duration {
	if c.Rates[FaultIdleDrop] <= 0 {
		return 0
	}
	return c.LBIdle
}

// validate reports a config no scenario makes.
func (c *Config) validate() error {
	switch {
	case c.Scenario != "" && c.Scenario != ScenarioFaults && c.Scenario != ScenarioHA:
		return fmt.Errorf("scenario %q: want %s or %s", c.Scenario, ScenarioFaults, ScenarioHA)
	case c.Scenario == ScenarioHA && c.Replicas < 2:
		return fmt.Errorf("scenario %s with %d replicas: want 2 or more (Config.UseScenario sets them)", ScenarioHA, c.Replicas)
	case c.Scenario == ScenarioHA && c.Restart:
		return fmt.Errorf("scenario %s: -soak.restart restarts the one API server of scenario %s; %s plans its own restarts", ScenarioHA, ScenarioFaults, ScenarioHA)
	}
	return nil
}

// RegisterFlags registers c's fields as flags named soak.*, their defaults
// c's values. -soak.scenario sets the fields its scenario implies
// ([Config.UseScenario]); flags after it set them again.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("soak.scenario", fmt.Sprintf("%s (one API server, connection faults and a restart) or %s (two API servers behind a load balancer, GOAWAY chance 0.02, a rolling restart and a kill; no connection faults) (default %s)", ScenarioFaults, ScenarioHA, ScenarioFaults), c.UseScenario)
	fs.Int64Var(&c.Seed, "soak.seed", c.Seed, "seed of the fault plan and the clients' choices")
	fs.DurationVar(&c.Duration, "soak.duration", c.Duration, "how long the clients run")
	fs.IntVar(&c.Clients, "soak.clients", c.Clients, "concurrent clients of the gateway")
	fs.IntVar(&c.Sandboxes, "soak.sandboxes", c.Sandboxes, "sandboxes each client owns")
	for _, name := range rateFaults {
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
// API server through the fault proxy, as the gateway's own user, for
// namespace; dir holds the run's artifacts. h serves its HTTP API and
// /metrics, until stop. [Process] runs examples/gateway.
type Gateway func(t testing.TB, cfg *rest.Config, namespace, dir string) (h http.Handler, stop func())

// GatewayUser is the API server user the gateway runs as.
const GatewayUser = "kubewire-gateway"

// Report is a run and its verdict.
type Report struct {
	Scenario     string             `json:"scenario"`
	Replicas     int                `json:"replicas"`
	GoawayChance float64            `json:"goawayChance,omitempty"`
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
	// Balancer is the load balancer's counters at the end of an HA run.
	Balancer *kubetest.BalancerStats `json:"balancer,omitempty"`
	Result   *Result                 `json:"result"`
	// Start and End are the gateway process's, before the clients start
	// and after they stopped and the sandboxes converged.
	Start     Snapshot  `json:"start"`
	End       Snapshot  `json:"end"`
	Tolerance Tolerance `json:"tolerance"`
	// Resent counts the POSTs sent twice under [Config.ResendPOST].
	Resent int      `json:"resent,omitempty"`
	Leaks  []string `json:"leaks,omitempty"`
	Errors []string `json:"errors,omitempty"`
	Dir    string   `json:"dir"`
}

// Failed reports whether the run broke a rule that must hold.
func (r *Report) Failed() bool { return r.Result.Failed() || len(r.Leaks) > 0 || len(r.Errors) > 0 }

// Run runs a soak of gw: a kube-apiserver and etcd with an audit log (or,
// in [ScenarioHA], c.Replicas of them behind a load balancer), the
// agent-sandbox controller and a fake kubelet, the fault proxy in front of
// the API server, the gateway behind it, the clients and the fence
// changes for c.Duration under the planned faults; then it lets the
// sandboxes converge, reads their final state, stops the gateway and
// checks. It logs the report's table and JSON; the caller judges it. It
// needs KUBEBUILDER_ASSETS: without it the test is skipped, and if the
// API server does not start it fails, as [kubetest.Env.Config] does.
func Run(t testing.TB, c Config, gw Gateway) *Report {
	t.Helper()
	if c.Scenario == "" {
		c.Scenario = ScenarioFaults
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	s := &soakRun{t: t, c: c, wall: time.Now(), clients: &http.Transport{}}
	defer s.teardown()
	s.prepareDir()
	s.startAPIServer()
	s.startCluster()
	s.beginReport()
	s.startGateway(gw)
	s.prepareLoad()
	s.runLoad()
	s.awaitConvergence()
	s.measureLeaks()
	s.collectFaults()
	s.audit()
	s.writeReport()
	return s.rep
}

// soakRun is the state one [Run] hands from phase to phase. Each phase
// fails the test on an error, as Run does.
type soakRun struct {
	t    testing.TB
	c    Config
	wall time.Time

	dir      string
	auditLog string

	env   *kubetest.Env
	admin *rest.Config
	cs    *kubernetes.Clientset
	ns    string
	// gwcfg reaches the API server through proxy and api, as the
	// gateway's user.
	gwcfg *rest.Config
	proxy *transporttest.Proxy
	api   *apiProxy

	rep *Report

	srv         *httptest.Server
	gw          http.Handler
	stopGW      func()
	gatewayUp   bool
	clients     *http.Transport
	historyFile *os.File
	rec         *Recorder
	work        *workload
	inj         *injector
	faults      []planned

	final      map[string]State
	finalFence State
	windows    []Window
}

// prepareDir makes the artifacts directory and writes the audit policy
// there; a log left by an earlier run with the same Out would be judged
// with this one, so it goes.
func (s *soakRun) prepareDir() {
	s.t.Helper()
	s.dir = s.c.Out
	if s.dir == "" {
		s.dir = s.t.TempDir()
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	s.auditLog = filepath.Join(s.dir, "audit.log")
	if err := os.WriteFile(s.policy(), []byte(AuditPolicy), 0o644); err != nil {
		s.t.Fatal(err)
	}
	_ = os.Remove(s.auditLog)
}

func (s *soakRun) policy() string { return filepath.Join(s.dir, "audit-policy.yaml") }

// startAPIServer starts etcd and kube-apiserver, or c.Replicas of them
// behind a load balancer, with the sandbox CRD and the audit log, until
// the test ends.
//
// Replicas share the one audit log, as they share the one etcd: both
// append to it. kube-apiserver creates the file with O_APPEND before its
// log rotator opens it, so the rotator opens the existing file with
// O_APPEND too, and writes each event in one write(2), which the kernel
// appends whole, so two writers interleave whole events and overwrite
// none. (A rotator that created the file itself would open it without
// O_APPEND, each writer at its own offset.) The log never rotates in a
// soak. The checker orders events by resourceVersion and time, not by
// their place in the file.
func (s *soakRun) startAPIServer() {
	s.t.Helper()
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		s.t.Fatal(err)
	}
	apiLog, err := os.Create(filepath.Join(s.dir, "kube-apiserver.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = apiLog.Close() })
	s.env = kubetest.StartWith(kubetest.Options{CRDPaths: []string{crd}, APIServerOutput: apiLog,
		Replicas: s.c.Replicas, GoawayChance: s.c.GoawayChance, APIServerArgs: map[string]string{
			"audit-policy-file": s.policy(),
			"audit-log-path":    s.auditLog,
			// Megabytes before the log rotates: never, in a soak.
			"audit-log-maxsize": "100000",
			// A restart as a production API server behind a load balancer
			// does it: new requests get 429 with Retry-After while those in
			// flight drain, then connections close within 2s. Without it the
			// server waits its 60s request timeout for open watches to end.
			"shutdown-send-retry-after": "true",
		}})
	s.t.Cleanup(func() {
		if err := s.env.Stop(); err != nil {
			s.t.Error(err)
		}
	})
}

// startCluster makes the soak's namespace, runs the sandbox controller
// and the kubelet in it as admin, and gives the gateway its own user
// behind the fault proxy.
func (s *soakRun) startCluster() {
	s.t.Helper()
	s.admin = s.env.Config(s.t)
	s.admin.Wrap(Stamp)
	var err error
	s.cs, err = kubernetes.NewForConfig(s.admin)
	if err != nil {
		s.t.Fatal(err)
	}
	nsObj, err := s.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "soak-"}}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.ns = nsObj.Name
	sandboxtest.RunController(s.t, s.admin, s.ns)
	kubetest.RunKubelet(s.t, s.admin, s.ns)

	user, err := s.env.AddUser(GatewayUser, "system:masters")
	if err != nil {
		s.t.Fatal(err)
	}
	s.api = newAPIProxy(s.t, user, s.c.ResendPOST)
	s.gwcfg, s.proxy = kubetest.Proxied(s.t, s.api.config())
}

func (s *soakRun) beginReport() {
	s.t.Helper()
	c := s.c
	s.rep = &Report{Scenario: c.Scenario, Replicas: max(c.Replicas, 1), GoawayChance: c.GoawayChance, Seed: c.Seed, Duration: c.Duration, Clients: c.Clients, Sandboxes: c.Sandboxes, Rates: c.Rates, Restart: c.Restart,
		LBIdle: c.LBIdle, StallFor: c.StallFor, FenceChanges: c.FenceChanges, Tolerance: c.Tolerance, Dir: s.dir}
	s.t.Logf("soak: scenario %s, %d kube-apiserver(s), seed %d, %v, %d clients x %d sandboxes, namespace %s, artifacts in %s", c.Scenario, s.rep.Replicas, c.Seed, c.Duration, c.Clients, c.Sandboxes, s.ns, s.dir)
}

// startGateway starts the gateway and serves it.
func (s *soakRun) startGateway(gw Gateway) {
	s.t.Helper()
	h, stop := gw(s.t, s.gwcfg, s.ns, s.dir)
	s.gw, s.srv = h, httptest.NewServer(h)
	s.stopGW, s.gatewayUp = stop, true
}

// stopGateway stops the gateway once: measureLeaks does, to take the
// After snapshot, and teardown if a phase failed before.
func (s *soakRun) stopGateway() {
	if s.gatewayUp {
		s.gatewayUp = false
		s.srv.Close()
		s.stopGW()
	}
}

// prepareLoad opens the history and builds the clients, the fence
// changer and the fault plan.
func (s *soakRun) prepareLoad() {
	s.t.Helper()
	var err error
	s.historyFile, err = os.Create(s.historyPath())
	if err != nil {
		s.t.Fatal(err)
	}
	s.rec = NewRecorder(s.historyFile)
	quiet := &sync.RWMutex{}
	s.work = &workload{
		url: s.srv.URL, namespace: s.ns, http: &http.Client{Transport: s.clients}, rec: s.rec, quiet: quiet,
		timeout: s.c.OpTimeout, kinds: s.c.Kinds,
		template: `{"spec":{"containers":[{"name":"agent","image":"busybox"}]}}`,
	}
	s.inj = newInjector(s.proxy, s.restartAPIServer, quiet, s.c.idleDrop(), s.c.StallFor, time.Second)
	s.faults = plan(s.c.Seed, s.c.Duration, s.c.Rates, s.c.Restart)
	if s.c.Scenario == ScenarioHA {
		s.inj.rolling = func() error { return s.env.RollingRestart(kubetest.Graceful) }
		s.inj.kill = s.killReplica
		s.faults = append(s.faults, haPlan(s.c.Seed, s.c.Duration, s.c.Replicas)...)
		slices.SortStableFunc(s.faults, func(a, b planned) int { return int(a.At - b.At) })
	}
	s.t.Logf("soak: %d faults planned", len(s.faults))
}

// restartAPIServer restarts kube-apiserver and closes the gateway's
// connections to the API proxy when the restart begins and ends: the
// connections a restart breaks are the proxy's, which the gateway would
// otherwise never see break.
func (s *soakRun) restartAPIServer() error {
	s.api.srv.CloseClientConnections()
	err := s.env.RestartAPIServer()
	s.api.srv.CloseClientConnections()
	return err
}

// killReplica kills replica i and starts it again at once, as the
// kubelet restarts a crashed static pod of the control plane: the first
// restart comes without back-off. The kernel closes the replica's
// connections; the load balancer sends it new ones, which it resets,
// until its health checks mark it out. The gateway's connections end at
// the API proxy, so what reaches the gateway is the proxy cutting the
// streams whose upstream connection broke.
func (s *soakRun) killReplica(i int) error {
	if err := s.env.StopReplica(i, kubetest.Kill); err != nil {
		return err
	}
	return s.env.StartReplica(i)
}

func (s *soakRun) historyPath() string { return filepath.Join(s.dir, "history.jsonl") }

// runLoad takes the Start snapshot and runs the clients, the fence
// changer and the faults for c.Duration.
func (s *soakRun) runLoad() {
	s.t.Helper()
	var err error
	if s.rep.Start, err = steady(s.gw); err != nil {
		s.t.Fatal(err)
	}
	runCtx, stopRun := context.WithTimeout(context.Background(), s.c.Duration)
	defer stopRun()
	var wg sync.WaitGroup
	begin := time.Now()
	wg.Go(func() { s.inj.run(runCtx, begin, s.faults) })
	for i := range s.c.Clients {
		wg.Go(func() { s.work.client(runCtx, i, s.c.Seed, s.c.Sandboxes) })
	}
	wg.Go(func() { s.work.fencer(runCtx, s.cs, s.c.Seed, s.c.FenceChanges) })
	wg.Wait()
	s.inj.stop()
	s.clients.CloseIdleConnections()
	if s.c.Replicas > 1 {
		b := s.env.Balancer()
		s.rep.Balancer = &b
	}
}

// awaitConvergence waits for every sandbox to run inside the live fence
// and keeps the final state; not converging is an error of the report,
// not of the test, so the audit still runs.
func (s *soakRun) awaitConvergence() {
	s.t.Helper()
	sandboxes, err := versioned.NewForConfig(s.admin)
	if err != nil {
		s.t.Fatal(err)
	}
	s.final, s.finalFence, err = converge(context.Background(), sandboxes, s.cs.NetworkingV1().NetworkPolicies(s.ns).Get, s.ns, time.Minute)
	if err != nil {
		s.rep.Errors = append(s.rep.Errors, err.Error())
	}
}

// measureLeaks takes the End snapshot, reports growth from Start as
// leaks, and stops the gateway, which must exit 0 within its shutdown
// grace ([Process]).
func (s *soakRun) measureLeaks() {
	s.t.Helper()
	// Connections of clients that just finished, or of a gateway connection
	// a black hole still holds until its health check drops it, take a
	// moment to go: a leak is what stays.
	var err error
	if s.rep.End, err = Settle(s.gw, s.rep.Start, s.c.Tolerance, 10*time.Second); err != nil {
		s.t.Fatal(err)
	}
	s.stopGateway()
	for _, g := range s.rep.Start.Growth(s.rep.End, s.c.Tolerance) {
		s.rep.Leaks = append(s.rep.Leaks, "while the gateway ran: "+g)
	}
	s.rep.Resent = int(s.api.resent.Load())
}

// collectFaults flushes the history and takes what the injector armed,
// saw act, and failed at.
func (s *soakRun) collectFaults() {
	s.t.Helper()
	if err := s.rec.Flush(); err != nil {
		s.t.Fatal(err)
	}
	s.inj.mu.Lock()
	defer s.inj.mu.Unlock()
	s.rep.Armed, s.rep.Acted = s.inj.armed, s.inj.acted
	s.windows = slices.Clone(s.inj.windows)
	for _, err := range s.inj.errs {
		s.rep.Errors = append(s.rep.Errors, err.Error())
	}
}

// audit judges the history against the audit log and the final state.
func (s *soakRun) audit() {
	s.t.Helper()
	history, err := readFile(s.historyPath(), ReadHistory)
	if err != nil {
		s.t.Fatal(err)
	}
	events, err := readFile(s.auditLog, ReadAudit)
	if err != nil {
		s.t.Fatal(err)
	}
	s.rep.Result = Check(Input{History: history, Audit: events, GatewayUser: GatewayUser, Namespace: s.ns,
		Final: s.final, FinalFence: s.finalFence, Faults: s.windows, Causes: s.api.causes.snapshot()})
}

func (s *soakRun) writeReport() {
	s.t.Helper()
	s.rep.Wall = time.Since(s.wall)
	b, err := json.MarshalIndent(s.rep, "", "  ")
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "report.json"), b, 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("soak report:\n%s\n%s", s.rep.Table(), b)
}

// teardown releases what the phases left open, on every path out of
// [Run]; the API server and the controllers stop at the test's cleanup.
func (s *soakRun) teardown() {
	if s.historyFile != nil {
		_ = s.historyFile.Close()
	}
	s.clients.CloseIdleConnections()
	s.stopGateway()
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
	np, err := getFence(ctx, fenceName, metav1.GetOptions{})
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
