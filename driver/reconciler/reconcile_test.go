package reconciler_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/kubeadapter"
)

const staleWarning = "namespace workload fence generation changed; suspending stale boundary"

func TestMain(m *testing.M) {
	drivertest.Main(m)
}

func newReconciler(t testing.TB, d *driver.Driver, opts ...reconciler.Option) *reconciler.Reconciler {
	t.Helper()
	r, err := reconciler.New(d, opts...)
	require.NoError(t, err)
	return r
}

// TestStaleFenceSuspendedConverges is the field report's regression test:
// suspended sandboxes whose recorded fence generation is stale go through
// passes without a single write and without a warning.
func TestStaleFenceSuspendedConverges(t *testing.T) {
	for _, version := range []string{"v1beta1", "v1alpha1"} {
		t.Run(version, func(t *testing.T) {
			a := drivertest.StaleFixture(t, version, false)
			var l drivertest.Logs
			var passes []reconciler.PassStats
			r := newReconciler(t, drivertest.NewDriver(t, a, &l), reconciler.WithObserver(reconciler.ObserverFuncs{Pass: func(s reconciler.PassStats) { passes = append(passes, s) }}))
			for i := 0; i < 3; i++ {
				stats, err := r.Pass(context.Background())
				require.NoError(t, err)
				assert.Equal(t, 5, stats.Seen)
				assert.Zero(t, stats.Actions)
				assert.Zero(t, stats.Warnings)
			}
			assert.Zero(t, a.Mutations(), "no PATCH, POST or DELETE")
			assert.Zero(t, l.Count(staleWarning))
			assert.Zero(t, a.Count("GET get"), "a pass lists; it GETs only what it changes")
			assert.Equal(t, 6, a.Count("GET list"), "one list per namespace per pass")
			assert.Len(t, passes, 3)
			probes := 1 // v1beta1 served
			if version == "v1alpha1" {
				probes = 2 // v1beta1 404, then v1alpha1
			}
			assert.Equal(t, probes, a.Count("GET probe"), "the version is probed once, not per pass")
		})
	}
}

// TestStaleFenceRunningSuspendedOnce: the same fixture with running
// sandboxes yields one suspension patch and one warning and one Event per
// sandbox, then converges.
func TestStaleFenceRunningSuspendedOnce(t *testing.T) {
	for _, version := range []string{"v1beta1", "v1alpha1"} {
		t.Run(version, func(t *testing.T) {
			a := drivertest.StaleFixture(t, version, true)
			var l drivertest.Logs
			r := newReconciler(t, drivertest.NewDriver(t, a, &l))
			stats, err := r.Pass(context.Background())
			require.NoError(t, err)
			assert.Equal(t, reconciler.PassStats{Seen: 5, Actions: 5, Warnings: 5, Duration: stats.Duration}, stats)
			assert.Equal(t, 5, a.Count("PATCH patch"))
			// client-go's recorder writes Events in the background.
			assert.Eventually(t, func() bool { return a.Count("POST event") == 5 }, 10*time.Second, 10*time.Millisecond)
			assert.Equal(t, 5, l.Count(staleWarning))
			for _, name := range []string{"team-a/sb-0", "team-b/sb-x"} {
				ns, n, _ := strings.Cut(name, "/")
				spec := a.Sandbox(ns, n)["spec"].(map[string]any)
				if version == "v1alpha1" {
					assert.EqualValues(t, 0, spec["replicas"])
				} else {
					assert.Equal(t, "Suspended", spec["operatingMode"])
				}
			}

			for i := 0; i < 3; i++ {
				stats, err := r.Pass(context.Background())
				require.NoError(t, err)
				assert.Zero(t, stats.Actions)
				assert.Zero(t, stats.Warnings)
			}
			assert.Equal(t, 5, a.Count("PATCH patch"), "converged: nothing after the first pass")
			assert.Equal(t, 10, a.Mutations(), "five patches and five Events, all from the first pass")
			assert.Equal(t, 5, l.Count(staleWarning), "one warning per transition")
		})
	}
}

// TestEventLimit: an Event over the driver's event limit is dropped, not
// queued, and the reconciler's observer hears which were. Five
// suspensions under a burst of 2 and one token per eleven days: all five
// PATCHes are sent and warned about in the log, two Events are written,
// three are reported dropped. Under a burst of 5, all five are written.
func TestEventLimit(t *testing.T) {
	suspend := func(t *testing.T, burst int) (*drivertest.APIServer, *drivertest.Logs, int) {
		a := drivertest.StaleFixture(t, "v1beta1", true)
		l := new(drivertest.Logs)
		d := drivertest.NewDriver(t, a, l, driver.WithEventLimit(1e-6, burst))
		var dropped atomic.Int32
		rec := newReconciler(t, d, reconciler.WithObserver(reconciler.ObserverFuncs{Action: func(e reconciler.ActionEvent) {
			if e.EventDropped {
				dropped.Add(1)
			}
		}}))
		stats, err := rec.Pass(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 5, stats.Actions)
		assert.Equal(t, 5, a.Count("PATCH patch"))
		assert.Equal(t, 5, l.Count(staleWarning), "every warning is in the log")
		return a, l, int(dropped.Load())
	}
	t.Run("over the limit dropped", func(t *testing.T) {
		a, l, dropped := suspend(t, 2)
		assert.Equal(t, 3, dropped)
		assert.Eventually(t, func() bool { return a.Count("POST event") == 2 }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, 1, l.Count(`"dropped"=1`), "the first drop is logged")
	})
	t.Run("all are written", func(t *testing.T) {
		a, l, dropped := suspend(t, 5)
		assert.Zero(t, dropped)
		assert.Eventually(t, func() bool { return a.Count("POST event") == 5 }, 10*time.Second, 10*time.Millisecond)
		assert.Zero(t, l.Count("dropped Events"))
	})
}

// TestUnknownIsNotAbsent: when the API server fails the LIST, the fence
// read, or times out, nothing is suspended; the next pass recovers.
func TestUnknownIsNotAbsent(t *testing.T) {
	tests := []struct {
		name string
		kind driver.Kind
		fail func(w http.ResponseWriter, r *http.Request) bool
	}{
		{"list fails", driver.KindInternal, func(w http.ResponseWriter, r *http.Request) bool {
			if strings.HasSuffix(r.URL.Path, "/sandboxes") {
				drivertest.Status(w, 500, "InternalError", "etcdserver: request timed out")
				return true
			}
			return false
		}},
		{"fence read fails", driver.KindUnavailable, func(w http.ResponseWriter, r *http.Request) bool {
			if strings.Contains(r.URL.Path, "networkpolicies") {
				drivertest.Status(w, 503, "ServiceUnavailable", "apiserver is shutting down")
				return true
			}
			return false
		}},
		{"list times out", driver.KindUnavailable, func(w http.ResponseWriter, r *http.Request) bool {
			if strings.HasSuffix(r.URL.Path, "/sandboxes") {
				<-r.Context().Done()
				return true
			}
			return false
		}},
		{"fence read dies on the connection", driver.KindUnavailable, func(w http.ResponseWriter, r *http.Request) bool {
			if strings.Contains(r.URL.Path, "networkpolicies") {
				// Hijack and close: a transport error, not an answer.
				c, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = c.Close()
				}
				return true
			}
			return false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := drivertest.StaleFixture(t, "v1beta1", true)
			var l drivertest.Logs
			r := newReconciler(t, drivertest.NewDriver(t, a, &l, driver.WithAdapterOptions(kubeadapter.WithTimeout(300*time.Millisecond))))
			a.Mu.Lock()
			a.Fail = tt.fail
			a.Mu.Unlock()
			stats, err := r.Pass(context.Background())
			require.Error(t, err)
			assert.Equal(t, 2, stats.Errors, "both namespaces failed")
			assert.Zero(t, stats.Actions)
			assert.Zero(t, a.Mutations(), "nothing is suspended on unknown state")
			assert.Equal(t, tt.kind, driver.KindOf(err), "%v", err)

			a.Mu.Lock()
			a.Fail = nil
			a.Mu.Unlock()
			stats, err = r.Pass(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 5, stats.Actions, "the next pass recovers")
		})
	}
}

// TestAbsentFenceConfirmed: a fence that a read (or a cache whose watch
// was re-established) says is absent, while the API server has it, with
// the generation the sandboxes were admitted under, suspends nothing: a
// suspension on an absent or re-created fence waits for the API server's
// word. The soak found this: after a fence watch broke, the reconciler
// suspended sandboxes started under the fence created meanwhile.
func TestAbsentFenceConfirmed(t *testing.T) {
	a := drivertest.NewAPIServer(t, "v1beta1")
	a.AddFence("team-a", "fence-a", 2)
	a.AddFence("team-b", "fence-b", 2)
	a.AddSandbox("team-a", "sb-0", true, "fence-a", 2)
	a.AddSandbox("team-b", "sb-x", true, "fence-b", 2)
	var mu sync.Mutex
	reads := map[string]int{}
	a.Fail = func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "networkpolicies") {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		// The first read of each namespace's fence misses it.
		if reads[r.URL.Path]++; reads[r.URL.Path] == 1 {
			drivertest.Status(w, http.StatusNotFound, "NotFound", "networkpolicies.networking.k8s.io \"sandbox-workload-fence\" not found")
			return true
		}
		return false
	}
	r := newReconciler(t, drivertest.NewDriver(t, a, nil))
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Zero(t, stats.Actions)
	assert.Zero(t, a.Mutations())
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, reads, 2)
	for path, n := range reads {
		assert.Equal(t, 2, n, "%s: one confirming read", path)
	}
}

// TestConflictRedecides: a sandbox suspended by someone else between the
// list and the patch gets a 409; the reconciler reads it again, sees it
// converged and sends nothing more.
func TestConflictRedecides(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	r := newReconciler(t, drivertest.NewDriver(t, a, nil))
	var once sync.Once
	a.Mu.Lock()
	a.Fail = func(w http.ResponseWriter, req *http.Request) bool {
		if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/sb-0") {
			once.Do(func() {
				// Someone else suspends sb-0 first.
				a.Mu.Lock()
				obj := a.Sandboxes["team-a/sb-0"]
				obj["spec"].(map[string]any)["operatingMode"] = "Suspended"
				obj["metadata"].(map[string]any)["resourceVersion"] = a.NextRV()
				a.Mu.Unlock()
			})
		}
		return false
	}
	a.Mu.Unlock()
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, stats.Actions, "sb-0 converged under the reconciler's feet")
	assert.Equal(t, 1, a.Count("GET get"), "only the conflicting sandbox was read again")
	assert.Equal(t, 5, a.Count("PATCH patch"), "four patches and one 409")
}

// TestConflictSeesRecreatedFence: the fence is absent when the pass reads
// it and when the decision confirms it, and is back, with the uid the
// sandbox records, by the time the suspend patch meets a 409. The decision
// after the conflict reads the fence again instead of trusting the absence
// it saw, and the sandbox is left running.
func TestConflictSeesRecreatedFence(t *testing.T) {
	a := drivertest.NewAPIServer(t, "v1beta1")
	a.AddFence("team-a", "fence-a", 2)
	a.AddSandbox("team-a", "sb-0", true, "fence-a", 2)
	var mu sync.Mutex
	fenceReads := 0
	var once sync.Once
	a.Mu.Lock()
	a.Fail = func(w http.ResponseWriter, req *http.Request) bool {
		switch {
		case strings.Contains(req.URL.Path, "/namespaces/team-a/networkpolicies"):
			mu.Lock()
			defer mu.Unlock()
			// The pass's read and the confirming read miss the fence.
			if fenceReads++; fenceReads <= 2 {
				drivertest.Status(w, http.StatusNotFound, "NotFound", "networkpolicies.networking.k8s.io \"sandbox-workload-fence\" not found")
				return true
			}
		case req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/sb-0"):
			once.Do(func() {
				// Someone else writes sb-0 first: the patch gets a 409.
				a.Mu.Lock()
				a.Sandboxes["team-a/sb-0"]["metadata"].(map[string]any)["resourceVersion"] = a.NextRV()
				a.Mu.Unlock()
			})
		}
		return false
	}
	a.Mu.Unlock()
	stats, err := newReconciler(t, drivertest.NewDriver(t, a, nil)).Pass(context.Background())
	require.NoError(t, err)
	assert.Zero(t, stats.Actions)
	assert.Equal(t, 1, a.Count("PATCH patch"), "the one patch that met the 409")
	assert.Equal(t, 1, a.Count("GET get"), "sb-0 read again after the conflict")
	mu.Lock()
	assert.Equal(t, 3, fenceReads, "team-a's fence: the pass's read, the confirming read, and the read after the conflict")
	mu.Unlock()
	assert.Equal(t, "Running", a.Sandbox("team-a", "sb-0")["spec"].(map[string]any)["operatingMode"])
}

// TestListPaginates: a pass reads every page.
func TestListPaginates(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", false)
	d := drivertest.NewDriver(t, a, nil, driver.WithPageSize(2))
	stats, err := newReconciler(t, d).Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, stats.Seen)
	assert.Equal(t, 2+1, a.Count("GET list"), "team-a's four in pages of 2, team-b's one in one")
}

// TestJitter: the waits between passes spread over period*(1±jitter), so
// passes never beat in step with a timeout of the same length.
func TestJitter(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", false)
	r := newReconciler(t, drivertest.NewDriver(t, a, nil), reconciler.WithPeriod(10*time.Second), reconciler.WithJitter(0.2))
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for i := 0; i < 1000; i++ {
		w := reconciler.NextWait(r)
		require.GreaterOrEqual(t, w, 8*time.Second)
		require.LessOrEqual(t, w, 12*time.Second)
		lo, hi = min(lo, w), max(hi, w)
	}
	// 1000 uniform draws miss the outer tenth of either side with
	// probability 0.95^1000, about 5e-23.
	assert.Less(t, lo, 8500*time.Millisecond, "waits spread down to period*(1-jitter)")
	assert.Greater(t, hi, 11500*time.Millisecond, "waits spread up to period*(1+jitter)")
}

// TestOneWriter: while a Run or a Pass is under way, another Run or Pass
// of the same reconciler is refused, and once it ends the next one goes.
func TestOneWriter(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	// hold holds the first request whose path contains part until the
	// returned channel is closed, and closes held when it arrives.
	hold := func(part string) (held, release chan struct{}) {
		held, release = make(chan struct{}), make(chan struct{})
		var once sync.Once
		a.Mu.Lock()
		a.Fail = func(w http.ResponseWriter, r *http.Request) bool {
			if strings.Contains(r.URL.Path, part) {
				once.Do(func() {
					close(held)
					<-release
				})
			}
			return false
		}
		a.Mu.Unlock()
		return held, release
	}
	rec := newReconciler(t, drivertest.NewDriver(t, a, nil))
	// refusedRun is a Run that must be refused at once; one that is not
	// ends with the deadline instead.
	refusedRun := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rec.Run(ctx)
	}

	// Run's first request is its probe of the served version.
	held, release := hold("/apis/agents.x-k8s.io/")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	<-held
	_, err := rec.Pass(context.Background())
	assert.ErrorIs(t, err, reconciler.ErrBusy, "a Pass beside a Run")
	assert.ErrorIs(t, refusedRun(), reconciler.ErrBusy, "a second Run")
	cancel()
	close(release)
	assert.ErrorIs(t, <-done, context.Canceled)

	held, release = hold("networkpolicies")
	passed := make(chan error, 1)
	go func() {
		_, err := rec.Pass(context.Background())
		passed <- err
	}()
	<-held
	_, err = rec.Pass(context.Background())
	assert.ErrorIs(t, err, reconciler.ErrBusy, "a second Pass beside the first")
	assert.ErrorIs(t, refusedRun(), reconciler.ErrBusy, "a Run beside a Pass")
	close(release)
	require.NoError(t, <-passed)
	_, err = rec.Pass(context.Background())
	assert.NoError(t, err, "the Pass has ended")
}
