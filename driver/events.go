package driver

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
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
// Event into a series instead of creating new objects. Events are handed
// to it in the order recorded, at the rate of the limiter, and each only
// once none of the driver's sandbox writes is in flight, or maxHold has
// passed: the writes an Event explains go first. Until then they wait in
// pending. It starts with the first Event, so a driver that records none
// runs no goroutine.
type recorder struct {
	kube      kubernetes.Interface
	component string
	limiter   *rate.Limiter
	log       logr.Logger
	writes    writes // the driver's sandbox writes in flight
	closeOnce sync.Once

	mu          sync.Mutex
	pending     []event
	dropped     int  // Events refused because pending was full
	full        bool // pending is full, and the log has said so
	wake        chan struct{}
	broadcaster events.EventBroadcaster
	rec         events.EventRecorderLogger
	sink        *trackedSink
	stop        context.CancelFunc
	// stopPump stops the goroutine that hands pending Events to rec;
	// pumped is closed when it has returned.
	stopPump context.CancelFunc
	pumped   chan struct{}
	closed   bool
}

const (
	// maxHold bounds how long an Event waits for the driver's writes to
	// pause: under writes that never do, Events still go out, one per
	// maxHold.
	maxHold = time.Second
	// maxPending bounds the Events waiting, a few hundred bytes each:
	// beyond it an Event is dropped, as client-go's own queue drops one
	// beyond 1,000.
	maxPending = 50_000
)

// event is one Event waiting to be handed to client-go: what it is about,
// without the rest of the sandbox.
type event struct {
	namespace, name, version, resourceVersion string
	uid                                       types.UID
	reason, action, note                      string
}

// trackedSink counts the Event writes under way, so that shutdown can let
// them finish.
type trackedSink struct {
	events.EventSink
	writes writes
}

func (s *trackedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.writes.begin()()
	return s.EventSink.Create(ctx, e)
}

func (s *trackedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.writes.begin()()
	return s.EventSink.Update(ctx, e)
}

func (s *trackedSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.writes.begin()()
	return s.EventSink.Patch(ctx, e, data)
}

func newRecorder(kube kubernetes.Interface, component string, limiter *rate.Limiter, log logr.Logger) *recorder {
	return &recorder{kube: kube, component: component, limiter: limiter, log: log, wake: make(chan struct{}, 1)}
}

// writes counts writes in flight; idle is closed while there are none, or
// nil before the first. The zero value counts none.
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
	if idle == nil {
		return nil
	}
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
	if r.closed {
		r.mu.Unlock()
		return
	}
	if r.rec == nil {
		r.start()
	}
	if len(r.pending) >= maxPending {
		r.dropped++
		first := !r.full
		r.full = true
		r.mu.Unlock()
		if first {
			r.log.Info("dropping Events: too many wait to be written", "waiting", maxPending)
		}
		return
	}
	r.pending = append(r.pending, event{namespace: s.Namespace, name: s.Name, version: s.Version, resourceVersion: s.ResourceVersion,
		uid: s.UID, reason: reason, action: action, note: note})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// start starts client-go's recorder, logging to the driver's logger, and
// the pump. r.mu is held.
func (r *recorder) start() {
	r.sink = &trackedSink{EventSink: &events.EventSinkImpl{Interface: r.kube.EventsV1()}}
	r.broadcaster = events.NewBroadcaster(r.sink)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), r.log))
	r.stop = cancel
	// It fails only if called twice.
	_ = r.broadcaster.StartRecordingToSinkWithContext(ctx)
	r.rec = r.broadcaster.NewRecorder(scheme, r.component).WithLogger(r.log)
	pump, stopPump := context.WithCancel(context.Background())
	r.stopPump, r.pumped = stopPump, make(chan struct{})
	go r.pump(pump)
}

// pump hands the pending Events to client-go's recorder, oldest first, as
// the limiter and the driver's writes let it, until ctx is done.
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
		if r.limiter.Wait(ctx) != nil {
			return
		}
		hold, cancel := context.WithTimeout(ctx, maxHold)
		_ = r.writes.wait(hold)
		cancel()
		if ctx.Err() != nil {
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
			r.pending, r.full = nil, false
		}
		r.mu.Unlock()
		r.rec.Eventf(regarding(e), nil, corev1.EventTypeWarning, e.reason, e.action, "%s", e.note)
	}
}

func (r *recorder) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) > 0
}

// shutdown stops the recorder. It drops the Events not yet handed to
// client-go's recorder, and logs how many: those waiting and those refused
// because too many waited. An Event handed over just before may be lost
// too, since client-go hands it on in a goroutine of its own. It lets the
// Event writes under way finish (each is bounded by the client's
// per-request timeout). A second call waits for the first.
func (r *recorder) shutdown() { r.closeOnce.Do(r.close) }

func (r *recorder) close() {
	r.mu.Lock()
	r.closed = true
	started := r.broadcaster != nil
	r.mu.Unlock()
	if !started {
		return
	}
	r.stopPump()
	<-r.pumped
	r.mu.Lock()
	n := len(r.pending) + r.dropped
	r.pending = nil
	r.mu.Unlock()
	if n > 0 {
		r.log.Info("driver closed: dropped Events not yet written", "count", n)
	}
	r.broadcaster.Shutdown()
	// Not bounded by a context: each write is, by the client's timeout.
	_ = r.sink.writes.wait(context.Background())
	r.stop()
}

// regarding returns the typed object an Event refers to.
func regarding(e event) runtime.Object {
	meta := metav1.ObjectMeta{Namespace: e.namespace, Name: e.name, UID: e.uid, ResourceVersion: e.resourceVersion}
	if e.version == sandboxv1alpha1.GroupVersion.Version {
		return &sandboxv1alpha1.Sandbox{ObjectMeta: meta}
	}
	return &sandboxv1beta1.Sandbox{ObjectMeta: meta}
}
