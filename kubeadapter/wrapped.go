package kubeadapter

import (
	"net/http"

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
