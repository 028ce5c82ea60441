// Package roundtrip holds what kubewire's middleware packages share to
// honour the RoundTripper contract: the embedded wrapper that forwards
// WrappedRoundTripper and CloseIdleConnections, closing a request body that
// is not passed on, and telling an upgrade request; and the connection
// facts one middleware reads from another's errors without importing it.
package roundtrip

import (
	"errors"
	"net/http"

	"github.com/kubewire/kubewire/transport"
)

// CloseIdleConnections calls CloseIdleConnections on rt, or on the first
// RoundTripper below it that has that method, walking through wrappers
// that only expose WrappedRoundTripper, as apimachinery's
// utilnet.CloseIdleConnectionsFor does: client-go's own wrappers, and from
// v0.36 the tracked transport its cache hands a rest.Config's wrappers,
// have no CloseIdleConnections of their own. Middleware uses it to forward
// the call to the RoundTripper it wraps.
func CloseIdleConnections(rt http.RoundTripper) {
	for rt != nil {
		switch t := rt.(type) {
		case interface{ CloseIdleConnections() }:
			t.CloseIdleConnections()
			return
		case interface{ WrappedRoundTripper() http.RoundTripper }:
			rt = t.WrappedRoundTripper()
		default:
			return
		}
	}
}

// CloseRequestBody closes req.Body if there is one. A RoundTripper that
// returns an error without passing the request on must close the body.
func CloseRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// Wrap returns the Wrapped for next: next itself, or http.DefaultTransport
// when next is nil, as http.Client and otelhttp treat a nil RoundTripper.
// A middleware applied to nil then works instead of panicking on its first
// request.
func Wrap(next http.RoundTripper) Wrapped {
	if next == nil {
		next = http.DefaultTransport
	}
	return Wrapped{Next: next}
}

// IsConfigError reports whether err is, or wraps, a
// *transport.ConfigError: the request failed in a middleware built with
// invalid options, before anything was sent.
func IsConfigError(err error) bool {
	var ce *transport.ConfigError
	return errors.As(err, &ce)
}

// Wrapped is embedded by middleware RoundTrippers. It holds the
// RoundTripper they wrap and gives them WrappedRoundTripper, so that
// apimachinery's utilnet.CloseIdleConnectionsFor can walk through, and
// CloseIdleConnections, forwarded to Next.
type Wrapped struct {
	Next http.RoundTripper
}

// WrappedRoundTripper returns the wrapped RoundTripper.
func (w Wrapped) WrappedRoundTripper() http.RoundTripper { return w.Next }

// CloseIdleConnections forwards to the wrapped RoundTripper; middleware
// never empties the pool itself.
func (w Wrapped) CloseIdleConnections() { CloseIdleConnections(w.Next) }

// Holds reports whether match holds for rt or a RoundTripper it wraps. It
// looks through WrappedRoundTripper; a RoundTripper without that method
// hides what is below it.
func Holds(rt http.RoundTripper, match func(http.RoundTripper) bool) bool {
	for rt != nil {
		if match(rt) {
			return true
		}
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			return false
		}
		rt = w.WrappedRoundTripper()
	}
	return false
}
