package soak

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport/transporttest"
)

func TestPlan(t *testing.T) {
	rates := map[string]float64{FaultResetBefore: 60, FaultBlackHole: 0.1, FaultStall: 0}
	p := plan(7, time.Minute, rates, true)
	assert.Equal(t, p, plan(7, time.Minute, rates, true), "a seed replays its plan")
	assert.NotEqual(t, p, plan(8, time.Minute, rates, true))
	count := map[string]int{}
	for i, f := range p {
		count[f.Fault]++
		assert.Less(t, f.At, time.Minute)
		if i > 0 {
			assert.LessOrEqual(t, p[i-1].At, f.At, "in order")
		}
	}
	assert.InDelta(t, 60, count[FaultResetBefore], 25, "about its rate")
	assert.Equal(t, 1, count[FaultBlackHole], "a rare fault still comes once")
	assert.Zero(t, count[FaultStall])
	assert.Equal(t, 1, count[FaultRestart])
	assert.Contains(t, p, planned{At: 30 * time.Second, Fault: FaultRestart}, "in the middle")
}

func TestHAPlan(t *testing.T) {
	p := haPlan(7, time.Minute, 2)
	assert.Equal(t, p, haPlan(7, time.Minute, 2), "a seed replays its plan")
	require.Len(t, p, 2)
	assert.Equal(t, planned{At: 20 * time.Second, Fault: FaultRollingRestart}, p[0], "a third in")
	assert.Equal(t, FaultKill, p[1].Fault)
	assert.Equal(t, 40*time.Second, p[1].At, "two thirds in")
	killed := map[int]bool{}
	for seed := range int64(20) {
		killed[haPlan(seed, time.Minute, 2)[1].Replica] = true
	}
	assert.Equal(t, map[int]bool{0: true, 1: true}, killed, "the seed picks either replica")
}

func TestUseScenario(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.UseScenario(ScenarioHA))
	assert.Equal(t, 2, c.Replicas)
	assert.Equal(t, 0.02, c.GoawayChance)
	assert.False(t, c.Restart)
	for _, f := range rateFaults {
		assert.Zero(t, c.Rates[f], f)
	}
	require.NoError(t, c.validate())
	c.Restart = true
	assert.ErrorContains(t, c.validate(), "soak.restart")

	require.NoError(t, c.UseScenario(ScenarioFaults))
	assert.Equal(t, DefaultConfig().Rates, c.Rates)
	assert.Zero(t, c.Replicas)
	require.NoError(t, c.validate())
	assert.ErrorContains(t, c.UseScenario("chaos"), `scenario "chaos"`)
}

func TestScenarioFlag(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-soak.scenario=ha", "-soak.stall=2"}))
	assert.Equal(t, ScenarioHA, c.Scenario)
	assert.Equal(t, 2.0, c.Rates[FaultStall], "a flag after the scenario sets its field again")
	assert.Zero(t, c.Rates[FaultResetBefore])
}

// TestIdleDropOff: a rate of 0 turns idle drops off. The proxy dropped
// flows idle for LBIdle whatever the rate, so a run with no connection
// faults planned still had them: the ha scenario's first run reported
// "idle-drop 0/min: 0 armed, 4 acted".
func TestIdleDropOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p, err := transporttest.NewProxy(srv.Listener.Addr().String())
	require.NoError(t, err)
	defer p.Close()
	c := DefaultConfig()
	c.LBIdle = 20 * time.Millisecond
	c.Rates[FaultIdleDrop] = 0
	in := newInjector(p, nil, &sync.RWMutex{}, c.idleDrop(), c.StallFor, time.Second)
	defer in.stop()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func() error {
		resp, err := client.Get("http://" + p.Addr())
		if err == nil {
			err = resp.Body.Close()
		}
		return err
	}
	require.NoError(t, get())
	// The flow goes idle past LBIdle: the condition is time itself.
	<-time.After(5 * c.LBIdle)
	require.NoError(t, get(), "a flow idle past LBIdle was dropped with idle drops off")
	assert.Equal(t, 1, p.Accepted(), "one connection, reused")
	in.mu.Lock()
	defer in.mu.Unlock()
	assert.Zero(t, in.acted[FaultIdleDrop])
}
