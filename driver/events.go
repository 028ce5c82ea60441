package driver

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// scheme knows both Sandbox versions, so that Events can refer to either.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(sandboxv1beta1.AddToScheme(s))
	utilruntime.Must(sandboxv1alpha1.AddToScheme(s))
	return s
}()

// recorder records events.k8s.io/v1 Events through client-go's event
// machinery, which writes them in the background and folds repeats of one
// Event into a series instead of creating new objects. Events reach it in
// the order recorded, at the rate of its limiter and only while none of
// the driver's sandbox writes is in flight: the writes an Event explains
// go first. The rest wait in pending. It starts with the first Event, so
// a driver that records none runs no goroutine.
type recorder struct {
	kube      kubernetes.Interface
	component string
	limiter   *rate.Limiter
	log       logr.Logger
	writes    writes

	mu          sync.Mutex
	pending     []event
	wake        chan struct{}
	broadcaster events.EventBroadcaster
	rec         events.EventRecorder
	sink        *trackedSink
	stop        context.CancelFunc
	// stopPump stops the goroutine that hands pending Events to rec;
	// pumped is closed when it has returned.
	stopPump context.CancelFunc
	pumped   chan struct{}
	closed   bool
}

// event is one Event waiting for the limiter.
type event struct {
	regarding            runtime.Object
	reason, action, note string
}

// trackedSink counts the Event writes under way, so that shutdown can let
// them finish.
type trackedSink struct {
	events.EventSink
	mu     sync.Mutex
	idle   *sync.Cond
	active int
}

func newTrackedSink(sink events.EventSink) *trackedSink {
	s := &trackedSink{EventSink: sink}
	s.idle = sync.NewCond(&s.mu)
	return s
}

func (s *trackedSink) begin() func() {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.active--
		s.idle.Broadcast()
		s.mu.Unlock()
	}
}

func (s *trackedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.begin()()
	return s.EventSink.Create(ctx, e)
}

func (s *trackedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.begin()()
	return s.EventSink.Update(ctx, e)
}

func (s *trackedSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.begin()()
	return s.EventSink.Patch(ctx, e, data)
}

// wait returns when no write is under way.
func (s *trackedSink) wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.active > 0 {
		s.idle.Wait()
	}
}

func newRecorder(kube kubernetes.Interface, component string, limiter *rate.Limiter, log logr.Logger) *recorder {
	r := &recorder{kube: kube, component: component, limiter: limiter, log: log, wake: make(chan struct{}, 1)}
	r.writes.idle = make(chan struct{})
	close(r.writes.idle)
	return r
}

// writes counts the driver's sandbox writes in flight; idle is closed
// while there are none.
type writes struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// begin counts a write in flight until the function it returns is called.
func (w *writes) begin() (end func()) {
	w.mu.Lock()
	if w.n == 0 {
		w.idle = make(chan struct{})
	}
	w.n++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.n--; w.n == 0 {
			close(w.idle)
		}
		w.mu.Unlock()
	}
}

// wait returns when no write is in flight, or ctx is done.
func (w *writes) wait(ctx context.Context) error {
	w.mu.Lock()
	idle := w.idle
	w.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// warn records a Warning Event about s.
func (r *recorder) warn(s Sandbox, reason, action, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.rec == nil {
		r.sink = newTrackedSink(&events.EventSinkImpl{Interface: r.kube.EventsV1()})
		r.broadcaster = events.NewBroadcaster(r.sink)
		ctx, cancel := context.WithCancel(context.Background())
		r.stop = cancel
		// It fails only if called twice.
		_ = r.broadcaster.StartRecordingToSinkWithContext(ctx)
		r.rec = r.broadcaster.NewRecorder(scheme, r.component)
		pump, stopPump := context.WithCancel(context.Background())
		r.stopPump, r.pumped = stopPump, make(chan struct{})
		go r.pump(pump)
	}
	r.pending = append(r.pending, event{regarding: regarding(s), reason: reason, action: action, note: note})
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pump hands the pending Events to client-go's recorder, oldest first, as
// fast as the limiter lets it, until ctx is done.
func (r *recorder) pump(ctx context.Context) {
	defer close(r.pumped)
	for {
		if !r.waiting() {
			select {
			case <-r.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		// Take the token and the turn first: an Event still pending when
		// ctx ends is one shutdown counts as dropped.
		if r.limiter.Wait(ctx) != nil || r.writes.wait(ctx) != nil {
			return
		}
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.mu.Unlock()
			continue
		}
		e := r.pending[0]
		r.pending[0] = event{}
		if r.pending = r.pending[1:]; len(r.pending) == 0 {
			r.pending = nil
		}
		r.mu.Unlock()
		r.rec.Eventf(e.regarding, nil, corev1.EventTypeWarning, e.reason, e.action, "%s", e.note)
	}
}

func (r *recorder) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) > 0
}

// shutdown stops the recorder. It lets the Event writes under way finish
// (each is bounded by the client's per-request timeout) and drops the Events
// whose write has not begun, logging how many still waited for the limiter.
func (r *recorder) shutdown() {
	r.mu.Lock()
	if r.closed || r.broadcaster == nil {
		r.closed = true
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.stopPump()
	<-r.pumped
	r.mu.Lock()
	n := len(r.pending)
	r.pending = nil
	r.mu.Unlock()
	if n > 0 {
		r.log.Info("driver closed: dropped Events not yet written", "count", n)
	}
	r.broadcaster.Shutdown()
	r.sink.wait()
	r.stop()
}

// regarding returns the typed object an Event about s refers to.
func regarding(s Sandbox) runtime.Object {
	meta := metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
	if s.Version == sandboxv1alpha1.GroupVersion.Version {
		return &sandboxv1alpha1.Sandbox{ObjectMeta: meta}
	}
	return &sandboxv1beta1.Sandbox{ObjectMeta: meta}
}
