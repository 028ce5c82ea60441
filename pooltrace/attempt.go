package pooltrace

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// ConnInfo describes the connection that carried a request. See the package
// documentation for what the fields mean on HTTP/1.1 and HTTP/2.
type ConnInfo struct {
	Reused   bool
	WasIdle  bool
	IdleTime time.Duration
	// Proto is "HTTP/1.1" or "HTTP/2.0".
	Proto      string
	LocalAddr  net.Addr
	RemoteAddr net.Addr
}

// String describes the connection, for example "connection reused after
// 1.9s idle (HTTP/1.1 127.0.0.1:51234->127.0.0.1:8080)".
func (c ConnInfo) String() string {
	var b strings.Builder
	switch {
	case c.Reused && c.WasIdle:
		fmt.Fprintf(&b, "connection reused after %v idle", c.IdleTime.Round(time.Millisecond))
	case c.Reused:
		b.WriteString("connection reused while busy")
	default:
		b.WriteString("new connection")
	}
	b.WriteString(" (")
	b.WriteString(c.Proto)
	if c.LocalAddr != nil && c.RemoteAddr != nil {
		fmt.Fprintf(&b, " %s->%s", c.LocalAddr, c.RemoteAddr)
	}
	b.WriteString(")")
	return b.String()
}

// Attempt is what the middleware learned about one request attempt: one
// call of RoundTrip. Durations named after an event are measured from Start.
type Attempt struct {
	// Request is the request as the middleware received it, with the
	// context of the layers above (a span that a stack.WithAttemptMiddleware
	// layer started, for example). It is set for observers only and is nil
	// in an [Error]'s Attempt, so that an error does not keep the request.
	// Observers must not modify it or read its body.
	Request *http.Request
	Method  string
	Host    string
	// Path is the URL path, without the query string.
	Path  string
	Start time.Time
	// Duration is the time RoundTrip took: until the response headers or
	// the error.
	Duration time.Duration
	// HasConn reports whether a connection was obtained; Conn is its zero
	// value otherwise.
	HasConn bool
	Conn    ConnInfo
	// Earlier lists connections the request was sent on before Conn: net/http
	// re-sends a request that fails on a reused connection when it is safe by
	// its rules, and the server may then have executed it more than once.
	Earlier []ConnInfo
	// GotConn is when the connection was handed to the request.
	GotConn time.Duration
	// The timings below are recorded only when something will read them:
	// an observer ([WithObserver]), or a logger that logs every attempt (at
	// [WithVerbosity]). Otherwise they are zero, and a request costs three
	// httptrace hooks fewer.
	//
	// Dial is, for a new connection, the time from RoundTrip to the TCP
	// connection being ready: DNS, connect and any proxy CONNECT, without the
	// TLS handshake. Zero for a reused connection.
	Dial time.Duration
	// TLSHandshake is, for a new TLS connection, the time from the start of
	// the TLS handshake to the connection being handed to the request: the
	// handshake and, for HTTP/2, the connection preface. Zero otherwise.
	TLSHandshake time.Duration
	// WroteRequest is when the request, body included, was written; zero if
	// that was not reported by the time RoundTrip returned. On HTTP/2 the
	// write is reported from the writer goroutine and can come after the
	// response headers, so zero there does not prove the request unsent.
	WroteRequest time.Duration
	// FirstByte is when the first byte of the response arrived; zero if none.
	FirstByte time.Duration
	// StatusCode is the response status, zero on error.
	StatusCode int
	// Err is the error RoundTrip returned, if any.
	Err error
}

// Error is an error from a request, annotated with the connection it
// happened on. Unwrap returns the original error.
type Error struct {
	// Attempt is the attempt the error ended; its Err field is nil.
	Attempt Attempt
	Err     error

	conn   roundtrip.ConnKey // of Attempt.Conn, for FailedConn
	unsent bool              // for Unsent
}

func (e *Error) Error() string {
	var b strings.Builder
	a := &e.Attempt
	if !a.HasConn {
		b.WriteString("before a connection was established")
	} else {
		b.WriteString("on ")
		b.WriteString(a.Conn.String())
		for i := len(a.Earlier) - 1; i >= 0; i-- {
			b.WriteString(", re-sent by net/http after failing on ")
			b.WriteString(a.Earlier[i].String())
		}
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the original error.
func (e *Error) Unwrap() error { return e.Err }

var _ roundtrip.ConnError = (*Error)(nil)

// FailedConn returns an opaque key of the connection the attempt failed
// on, and false if there was none. It is for package retry, which reads it
// through an interface, so that the requests a lost connection failed
// share one retry token; its key is of no use elsewhere.
func (e *Error) FailedConn() (roundtrip.ConnKey, bool) {
	return e.conn, e.Attempt.HasConn && e.conn != roundtrip.ConnKey{}
}

// Unsent reports whether net/http looked for a connection for the attempt
// and handed it none, so that its request was certainly not written. Like
// FailedConn, it is for package retry.
func (e *Error) Unsent() bool { return e.unsent }

// Timeout reports whether the original error is a timeout. *url.Error asks
// its direct cause, so this keeps http.Client's Timeout() accurate.
func (e *Error) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout()
}

// Temporary reports whether the original error says it is temporary; it
// exists so that *Error satisfies net.Error.
func (e *Error) Temporary() bool {
	var t interface{ Temporary() bool }
	return errors.As(e.Err, &t) && t.Temporary()
}
