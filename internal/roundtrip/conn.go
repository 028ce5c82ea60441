package roundtrip

import (
	"fmt"
	"net"
	"net/http"
)

// ConnKey identifies a connection among those open at the same time: by
// its addresses and by the identity of its net.Conn, since two connections
// of a unix socket or a pipe share their addresses. It holds no reference
// to the connection. pooltrace names a failed attempt's connection with it
// and retry keys the budget's events by it, so that both agree on what one
// connection is.
type ConnKey struct {
	local, remote, id string
}

// KeyOf returns the key of c, and false if c is nil.
func KeyOf(c net.Conn) (ConnKey, bool) {
	if c == nil {
		return ConnKey{}, false
	}
	return ConnKey{local: addrString(c.LocalAddr()), remote: addrString(c.RemoteAddr()), id: fmt.Sprintf("%p", c)}, true
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.Network() + ":" + a.String()
}

// ConnError is implemented by an error that names the connection its
// attempt failed on: pooltrace's *Error. A middleware above finds it with
// errors.As and needs neither pooltrace's type nor a trace of its own.
type ConnError interface {
	error
	// FailedConn returns the key of the connection the attempt failed
	// on, and false if it had none or the key would not identify it.
	FailedConn() (ConnKey, bool)
	// Unsent reports whether the attempt's request was certainly never
	// written: net/http looked for a connection for it (the GetConn
	// hook) and handed it none (no GotConn), as when the TLS handshake
	// of a new connection was reset. net/http writes a request only to
	// a connection it handed over, on HTTP/1.1 and HTTP/2.
	Unsent() bool
}

// ConnTracer is implemented by a RoundTripper whose errors are ConnErrors
// (pooltrace's). A middleware above asks TracesConnections when it is
// built, to know whether it needs a trace of its own: that trace has to be
// in the request's context before the attempt, when no error can say.
type ConnTracer interface {
	TracesConnections()
}

// TracesConnections reports whether rt, or a RoundTripper it wraps, is a
// ConnTracer.
func TracesConnections(rt http.RoundTripper) bool {
	return Holds(rt, func(rt http.RoundTripper) bool {
		_, ok := rt.(ConnTracer)
		return ok
	})
}
