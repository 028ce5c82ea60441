package core

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// scheme knows the Sandbox type, so that Events can refer to one.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(sandboxv1beta1.AddToScheme(s))
	return s
}()

// maxNote is the longest note events.k8s.io/v1 accepts, in bytes (the API
// server's NoteLengthLimit); a longer one would cost the whole Event.
const maxNote = 1024

// recorder records Events through client-go's events broadcaster, as the
// driver's package doc says. Drops over the limit are logged at most once
// a minute with their count. It starts with the first Event, so a driver
// that records none runs no goroutine.
type recorder struct {
	kube      kubernetes.Interface
	component string
	limiter   *rate.Limiter
	log       logr.Logger

	mu          sync.Mutex
	closed      bool
	broadcaster events.EventBroadcaster
	rec         events.EventRecorderLogger
	stop        context.CancelFunc
	dropped     int       // not yet logged
	logged      time.Time // when drops were last logged
}

func newRecorder(kube kubernetes.Interface, component string, limiter *rate.Limiter, log logr.Logger) *recorder {
	return &recorder{kube: kube, component: component, limiter: limiter, log: log}
}

// warn records a Warning Event about s, or drops it when it is over the
// limit or the driver is closed. It reports whether it recorded it.
func (r *recorder) warn(s Sandbox, reason, action, note string) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	if !r.limiter.Allow() {
		r.dropped++
		n, now := r.dropped, time.Now()
		first := now.Sub(r.logged) >= time.Minute
		if first {
			r.dropped, r.logged = 0, now
		}
		r.mu.Unlock()
		if first {
			r.logDropped(n)
		}
		return false
	}
	if r.rec == nil {
		r.start()
	}
	rec := r.rec
	r.mu.Unlock()
	rec.Eventf(regarding(s), nil, corev1.EventTypeWarning, reason, action, "%s", truncate(note))
	return true
}

func (r *recorder) logDropped(n int) {
	r.log.Info("dropped Events over the event limit (driver.WithEventLimit); the warnings they carried are in this log",
		"dropped", n, "qps", float64(r.limiter.Limit()), "burst", r.limiter.Burst())
}

// start starts client-go's recorder, logging to the driver's logger. r.mu
// is held.
func (r *recorder) start() {
	r.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: r.kube.EventsV1()})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), r.log))
	r.stop = cancel
	// It fails only if called twice.
	_ = r.broadcaster.StartRecordingToSinkWithContext(ctx)
	r.rec = r.broadcaster.NewRecorder(scheme, r.component).WithLogger(r.log)
}

// shutdown stops the recorder and cancels the Event writes under way, and
// logs the drops not yet logged. Later Events are dropped. It is safe to
// call more than once.
func (r *recorder) shutdown() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	n := r.dropped
	r.mu.Unlock()
	if n > 0 {
		r.logDropped(n)
	}
	if r.broadcaster != nil {
		r.broadcaster.Shutdown()
		r.stop()
	}
}

// truncate cuts a note longer than events.k8s.io/v1 allows, on a rune
// boundary, and marks the cut.
func truncate(note string) string {
	if len(note) <= maxNote {
		return note
	}
	const mark = "..."
	cut := maxNote - len(mark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + mark
}

// regarding returns the typed object an Event refers to.
func regarding(s Sandbox) runtime.Object {
	return &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}}
}
