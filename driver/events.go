package driver

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// scheme knows both Sandbox versions, so that Events can refer to either.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = sandboxv1beta1.AddToScheme(s)
	_ = sandboxv1alpha1.AddToScheme(s)
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
	stop        context.CancelFunc
	closed      bool
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
		r.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: r.kube.EventsV1()})
		ctx, cancel := context.WithCancel(context.Background())
		r.stop = cancel
		// It fails only if called twice.
		_ = r.broadcaster.StartRecordingToSinkWithContext(ctx)
		r.rec = r.broadcaster.NewRecorder(scheme, r.component)
	}
	r.rec.Eventf(regarding(s), nil, corev1.EventTypeWarning, reason, action, "%s", note)
}

// shutdown stops the recorder; Events already queued are delivered.
func (r *recorder) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.broadcaster != nil {
		r.broadcaster.Shutdown()
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
