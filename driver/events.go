package driver

import (
	"context"
	"sync"

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
// Event into a series instead of creating new objects. It starts with the
// first Event, so a driver that records none runs no goroutine.
type recorder struct {
	kube      kubernetes.Interface
	component string

	mu          sync.Mutex
	broadcaster events.EventBroadcaster
	rec         events.EventRecorder
	sink        *trackedSink
	stop        context.CancelFunc
	closed      bool
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

func newRecorder(kube kubernetes.Interface, component string) *recorder {
	return &recorder{kube: kube, component: component}
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
	}
	r.rec.Eventf(regarding(s), nil, corev1.EventTypeWarning, reason, action, "%s", note)
}

// shutdown stops the recorder. It lets the Event writes under way finish
// (each is bounded by the client's per-request timeout) and drops the Events
// whose write has not begun.
func (r *recorder) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.broadcaster != nil {
		r.broadcaster.Shutdown()
		r.sink.wait()
		r.stop()
	}
}

// regarding returns the typed object an Event about s refers to.
func regarding(s Sandbox) runtime.Object {
	meta := metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
	if s.Version == sandboxv1alpha1.GroupVersion.Version {
		return &sandboxv1alpha1.Sandbox{ObjectMeta: meta}
	}
	return &sandboxv1beta1.Sandbox{ObjectMeta: meta}
}
