package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// The faults a soak mixes, by the names its flags and report use.
const (
	FaultResetBefore  = "reset-before"
	FaultResetAfter   = "reset-after"
	FaultCloseOnReuse = "close-on-reuse"
	FaultIdleDrop     = "idle-drop"
	FaultStall        = "stall"
	FaultBlackHole    = "black-hole"
	FaultRestart      = "apiserver-restart"
	// The faults of the ha scenario ([ScenarioHA]): a graceful restart of
	// each kube-apiserver replica in turn, and a replica killed and
	// started again.
	FaultRollingRestart = "rolling-restart"
	FaultKill           = "replica-kill"
)

// rateFaults are the faults planned at a rate per minute, each with its
// flag.
var rateFaults = []string{FaultResetBefore, FaultResetAfter, FaultCloseOnReuse, FaultIdleDrop, FaultStall, FaultBlackHole}

// faultNames orders the faults in reports.
var faultNames = append(slices.Clone(rateFaults), FaultRestart, FaultRollingRestart, FaultKill)

// planned is a fault due at an offset from the start of the run.
type planned struct {
	At    time.Duration `json:"at"`
	Fault string        `json:"fault"`
	// Replica is the kube-apiserver replica a kill stops.
	Replica int `json:"replica,omitempty"`
}

// plan draws the faults of a run from its seed: for each fault a Poisson
// process at its rate per minute, at least once if the rate is positive
// (a short run still meets every fault), and the API server restart, if
// any, in the middle. The same seed and rates give the same plan.
func plan(seed int64, d time.Duration, rates map[string]float64, restart bool) []planned {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x50a6))
	var out []planned
	for _, name := range rateFaults {
		rate := rates[name]
		if rate <= 0 {
			continue
		}
		mean := float64(time.Minute) / rate
		n := 0
		for at := time.Duration(rng.ExpFloat64() * mean); at < d; at += time.Duration(rng.ExpFloat64() * mean) {
			out = append(out, planned{At: at, Fault: name})
			n++
		}
		if n == 0 {
			out = append(out, planned{At: time.Duration(rng.Int64N(int64(d))), Fault: name})
		}
	}
	if restart {
		out = append(out, planned{At: d / 2, Fault: FaultRestart})
	}
	slices.SortStableFunc(out, func(a, b planned) int { return int(a.At - b.At) })
	return out
}

// haPlan is the ha scenario's plan for replicas kube-apiservers: a
// graceful rolling restart a third into the run, as an upgrade of the
// control plane does it, and a kill of one replica, drawn from the seed,
// two thirds in, as a crash or a lost node does it. Apart, so that each
// failure is attributable to one of them, and each with a third of the
// run after it for the clients to meet what it left.
func haPlan(seed int64, d time.Duration, replicas int) []planned {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x4a))
	return []planned{
		{At: d / 3, Fault: FaultRollingRestart},
		{At: 2 * d / 3, Fault: FaultKill, Replica: rng.IntN(replicas)},
	}
}

// injector applies a plan to the proxy and the API server, and records
// the windows in which each fault acted.
type injector struct {
	proxy   *transporttest.Proxy
	restart func() error
	// rolling restarts every replica gracefully in turn; kill kills one
	// and starts it again (the ha scenario).
	rolling func() error
	kill    func(replica int) error
	// quiet stops the workload while it is held, so that connections go
	// idle for the load balancer to drop.
	quiet    *sync.RWMutex
	lbIdle   time.Duration
	stallFor time.Duration
	settle   time.Duration

	mu      sync.Mutex
	armed   map[string]int
	acted   map[string]int
	windows []Window
	errs    []error
}

// newInjector is an injector of faults on p; an lbIdle of 0 drops no idle
// flow.
func newInjector(p *transporttest.Proxy, restart func() error, quiet *sync.RWMutex, lbIdle, stallFor, settle time.Duration) *injector {
	in := &injector{proxy: p, restart: restart, quiet: quiet, lbIdle: lbIdle, stallFor: stallFor, settle: settle, armed: map[string]int{}, acted: map[string]int{}}
	p.SetObserver(in.observe)
	p.SetIdleDrop(lbIdle)
	return in
}

// proxyFaults names the faults the proxy reports; it reports stalls too,
// which the injector records itself.
var proxyFaults = map[transporttest.Fault]string{
	transporttest.ResetBeforeForward: FaultResetBefore,
	transporttest.ResetAfterResponse: FaultResetAfter,
	transporttest.CloseOnSend:        FaultCloseOnReuse,
	transporttest.IdleDrop:           FaultIdleDrop,
	transporttest.BlackHole:          FaultBlackHole,
}

// observe records a fault the proxy applied.
func (in *injector) observe(f transporttest.Fault) {
	name := proxyFaults[f]
	if name == "" {
		return
	}
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.acted[name]++
	to := now.Add(in.settle)
	if f == transporttest.BlackHole {
		// Until the client gives up on the dead connection: the next
		// accepted one closes the window (see recovered).
		to = now.Add(time.Hour)
	}
	in.windows = append(in.windows, Window{Fault: name, From: now, To: to})
}

// run applies the plan until ctx is done.
func (in *injector) run(ctx context.Context, start time.Time, p []planned) {
	for _, f := range p {
		t := time.NewTimer(time.Until(start.Add(f.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		in.apply(ctx, f)
	}
}

func (in *injector) apply(ctx context.Context, f planned) {
	name := f.Fault
	in.mu.Lock()
	in.armed[name]++
	in.mu.Unlock()
	switch name {
	case FaultResetBefore:
		in.proxy.SetFaultOnce(transporttest.ResetBeforeForward)
	case FaultResetAfter:
		in.proxy.SetFaultOnce(transporttest.ResetAfterResponse)
	case FaultCloseOnReuse:
		in.proxy.SetFaultExistingOnce(transporttest.CloseOnSend)
	case FaultIdleDrop:
		// A quiet spell: the load balancer's idle time passes with nothing
		// in flight, and the next request on an idle flow is reset.
		in.quiet.Lock()
		sleep(ctx, 3*in.lbIdle)
		in.quiet.Unlock()
	case FaultStall:
		from := time.Now()
		in.proxy.SetFault(transporttest.Stall)
		sleep(ctx, in.stallFor)
		in.proxy.SetFault(transporttest.NoFault)
		in.window(FaultStall, from, time.Now().Add(in.settle))
	case FaultBlackHole:
		accepted := in.proxy.Accepted()
		in.proxy.SetFaultExisting(transporttest.BlackHole)
		go in.recovered(ctx, accepted)
	case FaultRestart:
		from := time.Now()
		accepted := in.proxy.Accepted()
		err := in.restart()
		in.mu.Lock()
		if err != nil {
			in.errs = append(in.errs, err)
		}
		in.mu.Unlock()
		in.window(FaultRestart, from, time.Now().Add(in.settle))
		go in.recovered(ctx, accepted)
	case FaultRollingRestart:
		from := time.Now()
		in.fail(in.rolling())
		in.windowDetail(FaultRollingRestart, from, time.Now().Add(in.settle), "every replica in turn, gracefully")
	case FaultKill:
		from := time.Now()
		in.fail(in.kill(f.Replica))
		in.windowDetail(FaultKill, from, time.Now().Add(in.settle), fmt.Sprintf("replica %d", f.Replica))
	}
}

// fail records an error of the rig's own doing, such as a replica that
// did not come back.
func (in *injector) fail(err error) {
	if err == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.errs = append(in.errs, err)
}

// recovered closes the open black-hole windows once the proxy accepted a
// connection after the count it had: the client gave up on the dead one.
func (in *injector) recovered(ctx context.Context, accepted int) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for in.proxy.Accepted() <= accepted && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.windows {
		if w := &in.windows[i]; w.To.After(now.Add(in.settle)) {
			w.To = now.Add(in.settle)
		}
	}
}

// window records a fault the injector applied itself.
func (in *injector) window(name string, from, to time.Time) { in.windowDetail(name, from, to, "") }

func (in *injector) windowDetail(name string, from, to time.Time, detail string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.acted[name]++
	in.windows = append(in.windows, Window{Fault: name, From: from, To: to, Detail: detail})
}

// stop clears every fault and closes open windows.
func (in *injector) stop() {
	in.proxy.SetFault(transporttest.NoFault)
	in.proxy.SetIdleDrop(0)
	in.proxy.SetObserver(nil)
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.windows {
		if w := &in.windows[i]; w.To.After(now) {
			w.To = now
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
