package kubeadapter

import (
	"net/http"
	"reflect"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// wrapped is embedded by kubeadapter's RoundTrippers. It gives them
// WrappedRoundTripper, so that apimachinery's utilnet.CloseIdleConnectionsFor
// can walk through, and CloseIdleConnections, forwarded to what they wrap:
// the pool belongs to the base transport.
type wrapped struct {
	next http.RoundTripper
}

// wrap returns the wrapped of next, or of http.DefaultTransport when next
// is nil, as http.Client treats a nil RoundTripper.
func wrap(next http.RoundTripper) wrapped {
	if next == nil {
		next = http.DefaultTransport
	}
	return wrapped{next: next}
}

func (w wrapped) WrappedRoundTripper() http.RoundTripper { return w.next }

// CloseIdleConnections walks through wrappers as client-go does: a
// RoundTripper with neither CloseIdleConnections nor WrappedRoundTripper
// below gets client-go's klog warning ("unknown transport type").
func (w wrapped) CloseIdleConnections() { utilnet.CloseIdleConnectionsFor(w.next) }

// then returns a function that calls f, then g; f may be nil.
func then[T any](f, g func(T)) func(T) {
	if f == nil {
		return g
	}
	return func(v T) {
		f(v)
		g(v)
	}
}

// isNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface: a typed nil, which a nil check of the interface
// misses and which would panic on the first call. The root module keeps
// its own copy for its options: nothing is internal across modules.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
