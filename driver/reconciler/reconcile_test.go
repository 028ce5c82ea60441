package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/core"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/driver/reconciler"
)

const staleWarning = "namespace workload fence generation changed; suspending stale boundary"

// ownSelector selects the sandboxes of the fakes' gateway, "gw".
const ownSelector = driver.LabelManagedBy + "=" + drivertest.DriverName + "," + driver.LabelGateway + "=gw"

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
	f := drivertest.StaleFixture(t, false)
	var l drivertest.Logs
	var passes []reconciler.PassStats
	r := newReconciler(t, f.Driver(t, &l), reconciler.WithObserver(&observer{pass: func(s reconciler.PassStats) { passes = append(passes, s) }}))
	for i := 0; i < 3; i++ {
		stats, err := r.Pass(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 5, stats.Seen)
		assert.Zero(t, stats.Actions)
	}
	assert.Zero(t, f.Mutations(), "no create, update, patch or delete")
	assert.Zero(t, l.Count("warning:"))
	assert.Zero(t, f.Count("get", "sandboxes"), "a pass lists; it GETs only what it changes")
	assert.Len(t, passes, 3)
	assert.Equal(t, []int64{500, 500, 500, 500, 500, 500}, f.Limits(), "one list per namespace per pass")
	assert.Equal(t, 1, f.Count("get", "resource"), "the API is probed once, not per pass")
	for _, a := range f.Actions("list", "sandboxes") {
		assert.Equal(t, ownSelector, a.(k8stesting.ListAction).GetListRestrictions().Labels.String(), "every list selects the gateway's own")
	}
}

// TestV1alpha1OnlyRefused: on a cluster that serves Sandboxes only as
// v1alpha1 (agent-sandbox v0.4.x), a pass fails with the error that names
// the upgrade path, and writes nothing.
func TestV1alpha1OnlyRefused(t *testing.T) {
	f := drivertest.NewFake(t)
	f.Serve("v1alpha1")
	r := newReconciler(t, f.Driver(t, nil))
	_, err := r.Pass(context.Background())
	require.ErrorIs(t, err, core.ErrV1alpha1Only)
	assert.Zero(t, f.Mutations(), "no create, update, patch or delete")
}

// TestStaleFenceRunningSuspendedOnce: the same fixture with running
// sandboxes yields one suspension patch and one warning and one Event per
// sandbox, then converges.
func TestStaleFenceRunningSuspendedOnce(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	var l drivertest.Logs
	r := newReconciler(t, f.Driver(t, &l))
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, reconciler.PassStats{Seen: 5, Actions: 5, Duration: stats.Duration}, stats)
	assert.Equal(t, 5, f.Count("patch", "sandboxes"))
	// client-go's recorder writes Events in the background.
	require.Eventually(t, func() bool { return f.Count("create", "events") == 5 }, 10*time.Second, 10*time.Millisecond)
	assert.Len(t, f.Events(context.Background(), t), 5)
	assert.Equal(t, 5, l.Count(staleWarning))
	for _, name := range []string{"team-a/sb-0", "team-b/sb-x"} {
		ns, n, _ := strings.Cut(name, "/")
		assert.False(t, running(t, f, ns, n), "%s suspended", name)
	}

	for i := 0; i < 3; i++ {
		stats, err := r.Pass(context.Background())
		require.NoError(t, err)
		assert.Zero(t, stats.Actions)
	}
	assert.Equal(t, 5, f.Count("patch", "sandboxes"), "converged: nothing after the first pass")
	assert.Equal(t, 10, f.Mutations(), "five patches and five Events, all from the first pass")
	assert.Equal(t, 5, l.Count(staleWarning), "one warning per transition")
}

// running reports the intent of f's stored sandbox ns/name.
func running(t *testing.T, f *drivertest.Fake, ns, name string) bool {
	t.Helper()
	ok, err := f.Running(ns, name)
	require.NoError(t, err)
	return ok
}

// TestEventLimit: an Event over the driver's event limit is dropped, not
// queued, and the reconciler's observer hears which were. Five
// suspensions under a burst of 2 and one token per eleven days: all five
// PATCHes are sent and warned about in the log, two Events are written,
// three are reported dropped. Under a burst of 5, all five are written.
func TestEventLimit(t *testing.T) {
	suspend := func(t *testing.T, burst int) (*drivertest.Fake, *drivertest.Logs, int) {
		f := drivertest.StaleFixture(t, true)
		l := new(drivertest.Logs)
		d := f.Driver(t, l, driver.WithEventLimit(1e-6, burst))
		var dropped atomic.Int32
		rec := newReconciler(t, d, reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) {
			if e.EventDropped {
				dropped.Add(1)
			}
		}}))
		stats, err := rec.Pass(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 5, stats.Actions)
		assert.Equal(t, 5, f.Count("patch", "sandboxes"))
		assert.Equal(t, 5, l.Count(staleWarning), "every warning is in the log")
		return f, l, int(dropped.Load())
	}
	t.Run("over the limit dropped", func(t *testing.T) {
		f, l, dropped := suspend(t, 2)
		assert.Equal(t, 3, dropped)
		assert.Eventually(t, func() bool { return f.Count("create", "events") == 2 }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, 1, l.Count(`"dropped"=1`), "the first drop is logged")
	})
	t.Run("all are written", func(t *testing.T) {
		f, l, dropped := suspend(t, 5)
		assert.Zero(t, dropped)
		assert.Eventually(t, func() bool { return f.Count("create", "events") == 5 }, 10*time.Second, 10*time.Millisecond)
		assert.Zero(t, l.Count("dropped Events"))
	})
}

// TestUnknownIsNotAbsent: when the API server fails the LIST or the fence
// read, or they get no answer (a timeout, a connection reset), nothing is
// suspended; the error names what failed and keeps its cause; the next
// pass recovers.
func TestUnknownIsNotAbsent(t *testing.T) {
	tests := []struct {
		name     string
		resource string
		verb     string
		give     func(k8stesting.Action) error
		want     string // what the error says the reconciler was doing
		cause    func(error) bool
	}{
		{"list fails", "sandboxes", "list", func(a k8stesting.Action) error {
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}, "listing sandboxes of team-a", apierrors.IsInternalError},
		{"fence read fails", "networkpolicies", "get", func(a k8stesting.Action) error {
			return apierrors.NewServiceUnavailable("apiserver is shutting down")
		}, "reading the fence of team-a", apierrors.IsServiceUnavailable},
		{"list times out", "sandboxes", "list", drivertest.Timeout, "listing sandboxes of team-a", func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
		}},
		{"fence read dies on the connection", "networkpolicies", "get", drivertest.Reset, "reading the fence of team-a", func(err error) bool {
			return errors.Is(err, syscall.ECONNRESET)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := drivertest.StaleFixture(t, true)
			var l drivertest.Logs
			r := newReconciler(t, f.Driver(t, &l))
			var failing atomic.Bool
			failing.Store(true)
			f.Fault(tt.verb, tt.resource, func(a k8stesting.Action) error {
				if !failing.Load() {
					return nil
				}
				return tt.give(a)
			})
			stats, err := r.Pass(context.Background())
			require.Error(t, err)
			assert.Equal(t, 2, stats.Errors, "both namespaces failed")
			assert.Zero(t, stats.Actions)
			assert.Zero(t, f.Mutations(), "nothing is suspended on unknown state")
			assert.ErrorContains(t, err, "reconciler: "+tt.want+": ")
			assert.True(t, tt.cause(err), "the cause survives: %v", err)
			assert.Zero(t, driver.KindOf(err), "not a driver error: %v", err)

			failing.Store(false)
			stats, err = r.Pass(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 5, stats.Actions, "the next pass recovers")
		})
	}
}

// notFound is the API server's answer for an absent fence.
func notFound(a k8stesting.Action) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"}, drivertest.FenceName)
}

// TestAbsentFenceConfirmed: a fence that a read (or a cache whose watch
// was re-established) says is absent, while the API server has it, with
// the generation the sandboxes were admitted under, suspends nothing: a
// suspension on an absent or re-created fence waits for the API server's
// word. The soak found this: after a fence watch broke, the reconciler
// suspended sandboxes started under the fence created meanwhile.
func TestAbsentFenceConfirmed(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddFence(t, "team-b", "fence-b", 2)
	f.AddSandbox(t, "team-a", "sb-0", true, "fence-a", 2)
	f.AddSandbox(t, "team-b", "sb-x", true, "fence-b", 2)
	var mu sync.Mutex
	reads := map[string]int{}
	f.Fault("get", "networkpolicies", func(a k8stesting.Action) error {
		mu.Lock()
		defer mu.Unlock()
		// The first read of each namespace's fence misses it.
		if reads[a.GetNamespace()]++; reads[a.GetNamespace()] == 1 {
			return notFound(a)
		}
		return nil
	})
	r := newReconciler(t, f.Driver(t, nil))
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Zero(t, stats.Actions)
	assert.Zero(t, f.Mutations())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"team-a": 2, "team-b": 2}, reads, "one confirming read of each")
}

// suspendedBy suspends a stored v1beta1 sandbox as another client would.
func suspendedBy(o runtime.Object) {
	o.(*sandboxv1beta1.Sandbox).Spec.OperatingMode = sandboxv1beta1.SandboxOperatingModeSuspended
}

// TestConflictRedecides: a sandbox suspended by someone else between the
// list and the patch gets a 409; the reconciler reads it again, sees it
// converged and sends nothing more.
func TestConflictRedecides(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	r := newReconciler(t, f.Driver(t, nil))
	var once sync.Once
	var changed error
	f.Fault("patch", "sandboxes", func(a k8stesting.Action) error {
		if a.(k8stesting.PatchAction).GetName() == "sb-0" {
			// Someone else suspends sb-0 first.
			once.Do(func() { changed = f.Change("team-a", "sb-0", suspendedBy) })
		}
		return nil
	})
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	require.NoError(t, changed)
	assert.Equal(t, 4, stats.Actions, "sb-0 converged under the reconciler's feet")
	assert.Equal(t, 1, f.Count("get", "sandboxes"), "only the conflicting sandbox was read again")
	assert.Equal(t, 5, f.Count("patch", "sandboxes"), "four patches and one 409")
	assert.False(t, running(t, f, "team-a", "sb-0"))
}

// TestConflictSeesRecreatedFence: the fence is absent when the pass reads
// it and when the decision confirms it, and is back, with the uid the
// sandbox records, by the time the suspend patch meets a 409. The decision
// after the conflict reads the fence again instead of trusting the absence
// it saw, and the sandbox is left running.
func TestConflictSeesRecreatedFence(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddSandbox(t, "team-a", "sb-0", true, "fence-a", 2)
	var mu sync.Mutex
	fenceReads := 0
	f.Fault("get", "networkpolicies", func(a k8stesting.Action) error {
		if a.GetNamespace() != "team-a" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		// The pass's read and the confirming read miss the fence.
		if fenceReads++; fenceReads <= 2 {
			return notFound(a)
		}
		return nil
	})
	var once sync.Once
	var changed error
	f.Fault("patch", "sandboxes", func(a k8stesting.Action) error {
		if a.(k8stesting.PatchAction).GetName() == "sb-0" {
			// Someone else writes sb-0 first: the patch gets a 409.
			once.Do(func() { changed = f.Change("team-a", "sb-0", func(runtime.Object) {}) })
		}
		return nil
	})
	stats, err := newReconciler(t, f.Driver(t, nil)).Pass(context.Background())
	require.NoError(t, err)
	require.NoError(t, changed)
	assert.Zero(t, stats.Actions)
	assert.Equal(t, 1, f.Count("patch", "sandboxes"), "the one patch that met the 409")
	assert.Equal(t, 1, f.Count("get", "sandboxes"), "sb-0 read again after the conflict")
	mu.Lock()
	assert.Equal(t, 3, fenceReads, "team-a's fence: the pass's read, the confirming read, and the read after the conflict")
	mu.Unlock()
	assert.True(t, running(t, f, "team-a", "sb-0"))
}

// TestListPaginates: a pass reads every page of 500, as the API server
// serves them.
func TestListPaginates(t *testing.T) {
	f := drivertest.NewFake(t)
	f.Paginate()
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddFence(t, "team-b", "fence-b", 2)
	for i := 0; i < 1001; i++ {
		f.AddSandbox(t, "team-a", fmt.Sprintf("sb-%04d", i), false, "fence-a", 1)
	}
	f.AddSandbox(t, "team-b", "sb-x", false, "fence-b", 1)
	stats, err := newReconciler(t, f.Driver(t, nil)).Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1002, stats.Seen)
	assert.Equal(t, []int64{500, 500, 500, 500}, f.Limits(), "team-a's 1001 in pages of 500; team-b's one in one")
}

// TestJitter: the waits between resyncs spread over period*(1±0.2), so
// resyncs never beat in step with a timeout of the same length.
func TestJitter(t *testing.T) {
	r := newReconciler(t, drivertest.NewFake(t).Driver(t, nil), reconciler.WithPeriod(10*time.Second))
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
	f := drivertest.StaleFixture(t, true)
	// hold holds the next request of verb on resource until the returned
	// channel is closed, and closes held when it arrives.
	hold := func(verb, resource string) (held, release chan struct{}) {
		held, release = make(chan struct{}), make(chan struct{})
		var once sync.Once
		f.Fault(verb, resource, func(k8stesting.Action) error {
			once.Do(func() {
				close(held)
				<-release
			})
			return nil
		})
		return held, release
	}
	rec := newReconciler(t, f.Driver(t, nil))
	// refusedRun is a Run that must be refused at once; one that is not
	// ends with the deadline instead.
	refusedRun := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rec.Run(ctx)
	}

	// Run's first request is its probe of the API.
	held, release := hold("get", "resource")
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

	held, release = hold("get", "networkpolicies")
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

// TestLostAnswerStillReported: a suspension whose first copy the API
// server applied but whose answer was lost comes back, re-sent by
// kubeadapter, as a 409 that may have been applied. The reconciler reads
// the sandbox again, finds it suspended, and reports the suspension it
// made, with its warning, Event and action, instead of deciding that
// nothing was to be done.
func TestLostAnswerStillReported(t *testing.T) {
	f := drivertest.StaleFixture(t, true)
	var l drivertest.Logs
	var mu sync.Mutex
	var events []reconciler.ActionEvent
	r := newReconciler(t, f.Driver(t, &l), reconciler.WithObserver(&observer{action: func(e reconciler.ActionEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}))
	f.LoseAnswers(1)
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, stats.Actions, "the suspension whose answer was lost is counted")
	assert.Equal(t, 5, l.Count(staleWarning))
	assert.Equal(t, 1, l.Count(`"maybeAppliedByEarlierCopy"=true`), "the log says which copy did it")
	assert.Eventually(t, func() bool { return f.Count("create", "events") == 5 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	assert.Len(t, events, 5)
	for _, e := range events {
		assert.NoError(t, e.Err)
		assert.Equal(t, reconciler.ActionSuspend, e.Type)
	}
	mu.Unlock()
	for _, sb := range []struct{ ns, name string }{{"team-a", "sb-0"}, {"team-a", "sb-1"}, {"team-a", "sb-2"}, {"team-a", "sb-3"}, {"team-b", "sb-x"}} {
		assert.False(t, running(t, f, sb.ns, sb.name), "%s/%s suspended", sb.ns, sb.name)
	}
	stats, err = r.Pass(context.Background())
	require.NoError(t, err)
	assert.Zero(t, stats.Actions, "converged")
}

// TestLostClearBootstrapAnswer: a bootstrap mark cleared by a first copy
// whose answer was lost is reported, and the sandbox is not left behind:
// the state the first copy wrote is no write of the reconciler's to wait
// out, so the next fence change still suspends it.
func TestLostClearBootstrapAnswer(t *testing.T) {
	f := drivertest.NewFake(t)
	f.AddFence(t, "team-a", "fence-a", 2)
	f.AddSandbox(t, "team-a", "sb", true, "fence-a", 2)
	require.NoError(t, f.Change("team-a", "sb", func(o runtime.Object) {
		m, err := meta.Accessor(o)
		require.NoError(t, err)
		ann := m.GetAnnotations()
		ann[drivertest.AnnBootstrap] = "2026-11-29T12:00:00Z"
		m.SetAnnotations(ann)
	}))
	r := newReconciler(t, f.Driver(t, nil))
	f.LoseAnswers(1)
	stats, err := r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions, "the bootstrap mark's clearing is reported")

	f.AddFence(t, "team-a", "fence-a", 3)
	stats, err = r.Pass(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Actions, "the fence change suspends it")
	assert.False(t, running(t, f, "team-a", "sb"))
}
