package reconciler_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubewire/kubewire/driver/drivermetrics"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

func TestNewRejectsBadOptions(t *testing.T) {
	d := drivertest.NewFake(t).Driver(t, nil)
	le := func(f func(*reconciler.LeaderElection)) reconciler.Option {
		le := reconciler.LeaderElection{Namespace: "a", Name: "gw-reconciler"}
		f(&le)
		return reconciler.WithLeaderElection(le)
	}
	tests := []struct {
		give reconciler.Option
		want string
	}{
		{reconciler.WithPeriod(200 * time.Millisecond), "reconciler: WithPeriod must be at least 1s, got 200ms"},
		{reconciler.WithPeriod(0), "reconciler: WithPeriod must be at least 1s, got 0s"},
		{reconciler.WithPeriod(25 * time.Hour), "reconciler: WithPeriod must be at most 24h0m0s, got 25h0m0s"},
		{reconciler.WithPeriod(math.MaxInt64), "reconciler: WithPeriod must be at most 24h0m0s, got 2562047h47m16.854775807s"},
		{reconciler.WithBootstrapGrace(0), "reconciler: WithBootstrapGrace must be positive, got 0s"},
		{reconciler.WithBootstrapGrace(-time.Minute), "reconciler: WithBootstrapGrace must be positive, got -1m0s"},
		{reconciler.WithWorkers(0), "reconciler: WithWorkers must be at least 1, got 0"},
		{reconciler.WithWriteLimit(0, 10), "reconciler: WithWriteLimit qps must be positive, got 0"},
		{reconciler.WithWriteLimit(-5, 10), "reconciler: WithWriteLimit qps must be positive, got -5"},
		{reconciler.WithWriteLimit(math.NaN(), 10), "reconciler: WithWriteLimit qps must be positive, got NaN"},
		{reconciler.WithWriteLimit(50, 0), "reconciler: WithWriteLimit burst must be at least 1, got 0"},
		{reconciler.WithObserver(nil), "reconciler: WithObserver must not be nil"},
		{reconciler.WithObserver((*drivermetrics.Metrics)(nil)), "reconciler: WithObserver must not be nil, got a nil *drivermetrics.Metrics"},
		{reconciler.WithQueueMetrics(nil), "reconciler: WithQueueMetrics must not be nil"},
		{reconciler.WithQueueMetrics((*nilProvider)(nil)), "reconciler: WithQueueMetrics must not be nil, got a nil *reconciler_test.nilProvider"},
		{le(func(le *reconciler.LeaderElection) { le.Namespace = "Bad_NS" }), `reconciler: WithLeaderElection Namespace "Bad_NS" is not a valid namespace name`},
		{le(func(le *reconciler.LeaderElection) { le.Name = "" }), `reconciler: WithLeaderElection Name "" is not a valid object name`},
		{le(func(le *reconciler.LeaderElection) { le.LeaseDuration = -time.Second }), "reconciler: WithLeaderElection LeaseDuration must be positive, got -1s"},
		// A Lease holds its duration in whole seconds: client-go truncates,
		// and 900ms would be a Lease of 0 seconds that no replica leads.
		{le(func(le *reconciler.LeaderElection) { le.LeaseDuration = 900 * time.Millisecond }),
			"reconciler: WithLeaderElection LeaseDuration must be a whole number of seconds (a Lease holds it in seconds), got 900ms"},
		{le(func(le *reconciler.LeaderElection) { le.LeaseDuration = 1900 * time.Millisecond }),
			"reconciler: WithLeaderElection LeaseDuration must be a whole number of seconds (a Lease holds it in seconds), got 1.9s"},
		{le(func(le *reconciler.LeaderElection) { le.LeaseDuration = math.MaxInt64 }),
			"reconciler: WithLeaderElection LeaseDuration must be at most 596523h14m7s (a Lease holds it in int32 seconds), got 2562047h47m16.854775807s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			r, err := reconciler.New(d, reconciler.WithWorkers(2), tt.give)
			assert.EqualError(t, err, tt.want)
			assert.Nil(t, r)
		})
	}
	_, err := reconciler.New(nil)
	assert.EqualError(t, err, "reconciler: New: nil *driver.Driver")
}

// TestOptions: the bounds themselves are valid, nil options are skipped,
// the later option wins, and +Inf is rate.Inf.
func TestOptions(t *testing.T) {
	d := drivertest.NewFake(t).Driver(t, nil)
	r, err := reconciler.New(d, nil,
		reconciler.WithPeriod(time.Second), reconciler.WithPeriod(24*time.Hour),
		reconciler.WithBootstrapGrace(time.Nanosecond), reconciler.WithWorkers(1), reconciler.WithWriteLimit(math.Inf(1), 1),
		reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: "a", Name: "gw-reconciler"}),
		reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: "a", Name: "gw-reconciler", LeaseDuration: time.Second}),
		reconciler.WithLeaderElection(reconciler.LeaderElection{Namespace: "a", Name: "gw-reconciler", LeaseDuration: maxLease}),
		reconciler.WithObserver(&observer{}), reconciler.WithQueueMetrics(drivermetrics.New().Queue()),
		reconciler.WithWriteLimit(0.5, 1))
	require.NoError(t, err)
	qps, burst := reconciler.WriteLimit(r)
	assert.Equal(t, rate.Limit(0.5), qps, "the later option wins")
	assert.Equal(t, 1, burst)

	r, err = reconciler.New(d, reconciler.WithWriteLimit(math.Inf(1), 1))
	require.NoError(t, err)
	qps, _ = reconciler.WriteLimit(r)
	assert.Equal(t, rate.Inf, qps)

	r, err = reconciler.New(d)
	require.NoError(t, err)
	qps, burst = reconciler.WriteLimit(r)
	assert.Zero(t, qps, "no write limit by default")
	assert.Zero(t, burst)
}

// maxLease is the longest LeaseDuration a Lease holds: math.MaxInt32
// seconds.
const maxLease = math.MaxInt32 * time.Second

// TestStartedUnderCurrentFence: a sandbox started under the current fence
// is left alone.
func TestStartedUnderCurrentFence(t *testing.T) {
	f := drivertest.StaleFixture(t, false)
	d := f.Driver(t, nil)
	_, err := d.Start(context.Background(), "team-a", "sb-1")
	require.NoError(t, err)
	patches := f.Count("patch", "sandboxes")
	require.Equal(t, 1, patches, "Start admitted sb-1 under the current fence")
	stats, err := newReconciler(t, d).Pass(context.Background())
	require.NoError(t, err)
	assert.Zero(t, stats.Actions)
	assert.Equal(t, patches, f.Count("patch", "sandboxes"), "the pass sent nothing")
}

// TestProbeBacksOff: while the API server cannot be reached, Run probes
// the Sandbox API after 1s, then doubling, whatever the resync period:
// over 2.5 s, at most three failures are logged. It tried every
// period/20, with WithPeriod(1s) a line every 50 ms.
func TestProbeBacksOff(t *testing.T) {
	f := drivertest.NewFake(t)
	f.Fault("get", "resource", drivertest.Reset)
	var l drivertest.Logs
	r := newReconciler(t, f.Driver(t, &l), reconciler.WithPeriod(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, r.Run(ctx), context.DeadlineExceeded)
	n := l.Count("probing the Sandbox API; retrying")
	assert.GreaterOrEqual(t, n, 1)
	assert.LessOrEqual(t, n, 3, "failed probes logged in 2.5 s")
	assert.LessOrEqual(t, f.Count("get", "resource"), 3, "probes sent in 2.5 s")
}

// nilProvider is a workqueue.MetricsProvider whose typed nil the option
// must refuse.
type nilProvider struct{ workqueue.MetricsProvider }
