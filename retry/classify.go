package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"golang.org/x/net/http2"
)

// Class says whether a failed request can have reached the server.
type Class int

const (
	// NotRetryable: the failure is not one a retry can fix, or it is not
	// known. Never retried.
	NotRetryable Class = iota
	// NotSent: the request certainly did not reach the server. Retried for
	// any method.
	NotSent
	// MaybeSent: the request may have reached the server. Retried only when
	// it is idempotent.
	MaybeSent
)

func (c Class) String() string {
	switch c {
	case NotSent:
		return "not sent"
	case MaybeSent:
		return "maybe sent"
	default:
		return "not retryable"
	}
}

// Classify is the default classifier of transport errors (see the package
// documentation). It uses errors.Is and errors.As, syscall errnos and the
// typed errors of net, crypto/tls and x/net/http2; [knownMessage] covers the
// few upstream errors that only their text identifies. It classifies the
// same on Go 1.26 and 1.27, whether the error comes from x/net/http2 or
// from net/http's own HTTP/2: net/http's stream errors turn into
// x/net/http2.StreamError through errors.As on both releases, and its
// GOAWAY errors are matched by their text.
func Classify(err error) Class {
	if err == nil {
		return NotRetryable
	}
	if errors.Is(err, context.Canceled) || isBodyError(err) {
		return NotRetryable
	}
	if isCertificateError(err) {
		return NotRetryable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return NotRetryable
		}
		return NotSent
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return NotSent
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return NotSent
	}
	if errors.Is(err, http2.ErrNoCachedConn) {
		return NotSent
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		if se.Code == http2.ErrCodeRefusedStream {
			return NotSent
		}
		return MaybeSent
	}
	var gae http2.GoAwayError
	if errors.As(err, &gae) {
		// Streams above the GOAWAY's last stream ID are failed with
		// errClientConnGotGoAway (knownMessage); one that gets a GoAwayError
		// was at or below it, so the server may have processed it.
		return MaybeSent
	}
	if c, _, ok := knownMessage(err); ok {
		return c
	}
	if connectionEnded(err) || errors.Is(err, context.DeadlineExceeded) {
		return MaybeSent
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return MaybeSent
	}
	return NotRetryable
}

// knownMessage classifies upstream errors that have no exported type or
// value, by their text, and says what they cost the retry budget
// ([budgetCause]). Each string is the upstream error's message:
//
//   - net/http tlsHandshakeTimeoutError: "net/http: TLS handshake timeout"
//     (a new connection; nothing was written, but the server did a TLS
//     handshake, so it costs a token).
//   - x/net/http2 and net/http's bundled copy, errClientConnGotGoAway:
//     "http2: Transport received Server's graceful shutdown GOAWAY" (the
//     stream was above the server's last stream ID: not processed).
//   - net/http's bundled http2StreamError for REFUSED_STREAM:
//     "stream error: stream ID 3; REFUSED_STREAM".
//   - x/net/http2 and net/http's copies (bundled in Go 1.26, internal in
//     1.27), errClientConnNotEstablished: "http2: client conn could not be
//     established" (the connection closed before its first stream was
//     given an ID: not sent, but the server did a TLS handshake, so it
//     costs a token).
//   - x/net/http2 and net/http's bundled copy: "http2: client connection
//     lost" (health check or read failure with streams open).
//   - x/net/http2 and net/http's copies (bundled in Go 1.26, internal in
//     1.27), errClientConnForceClosed: "http2: client connection force
//     closed via ClientConn.Close". net/http closes the connection this way
//     when a write on it failed (cleanupWriteRequest), so the other streams
//     of a connection that was reset can get it instead of the reset.
//   - x/net/http2 and net/http's copies, errClientConnClosed: "http2:
//     client conn is closed" (the connection closed while the request's
//     body was being written, its headers already sent).
//   - net/http's http2GoAwayError (Go 1.26, bundled) and
//     net/http/internal/http2.GoAwayError (Go 1.27), which unlike their
//     StreamError have no As method to turn into x/net/http2.GoAwayError:
//     "http2: server sent GOAWAY and closed the connection; LastStreamID=..."
//     (the stream was at or below the last stream ID: maybe processed).
//   - net/http errServerClosedIdle: "http: server closed idle connection".
//   - net/http: "net/http: HTTP/1.x transport connection broken".
func knownMessage(err error) (Class, cause, bool) {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "net/http: TLS handshake timeout"),
		strings.Contains(msg, "http2: client conn could not be established"):
		return NotSent, causeRequest, true
	case strings.Contains(msg, "http2: Transport received Server's graceful shutdown GOAWAY"),
		strings.Contains(msg, "; REFUSED_STREAM"):
		return NotSent, causeNoLoad, true
	case strings.Contains(msg, "http2: client connection lost"),
		strings.Contains(msg, "http2: client connection force closed via ClientConn.Close"),
		strings.Contains(msg, "http2: client conn is closed"),
		strings.Contains(msg, "http2: server sent GOAWAY and closed the connection"),
		strings.Contains(msg, "http: server closed idle connection"),
		strings.Contains(msg, "net/http: HTTP/1.x transport connection broken"):
		return MaybeSent, causeConnection, true
	}
	return NotRetryable, causeRequest, false
}

// cause says what a retryable failure costs the retry budget.
type cause int

const (
	// causeRequest: the failure is this request's own (a stream reset, a
	// timeout, an error not known to end the connection). One token.
	causeRequest cause = iota
	// causeConnection: the connection failed, and with it every request it
	// carried. One token for the connection, shared by those requests.
	causeConnection
	// causeNoLoad: the request never reached a server: the dial failed, or
	// the server refused the stream or left it unprocessed in a GOAWAY. No
	// token.
	causeNoLoad
)

// budgetCause tells what a failure costs the retry budget. It sees the same
// errors as [Classify], on Go 1.26 and 1.27, and is kept apart from it so
// that a classifier from [WithClassifier] cannot make a failure free: a
// failure is free only when budgetCause says causeNoLoad and the classifier
// says [NotSent].
func budgetCause(err error) cause {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return causeRequest
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return causeNoLoad
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, http2.ErrNoCachedConn) {
		return causeNoLoad
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		// A dial that never connected. One that connected and was reset
		// ("connect: connection reset by peer": the server accepted, then
		// dropped it) cost the server an accept: a server that resets
		// every new connection must stay bounded by the budget.
		var te interface{ Timeout() bool }
		if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
			(errors.As(err, &te) && te.Timeout()) {
			return causeNoLoad
		}
		return causeRequest
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		if se.Code == http2.ErrCodeRefusedStream {
			return causeNoLoad
		}
		return causeRequest
	}
	var gae http2.GoAwayError
	if errors.As(err, &gae) {
		return causeConnection
	}
	if _, c, ok := knownMessage(err); ok {
		return c
	}
	if connectionEnded(err) {
		return causeConnection
	}
	return causeRequest
}

// connectionEnded reports whether err says the connection under the
// request ended: reset, aborted, broken, timed out at the TCP level, or
// closed before the answer was read. [Classify] takes it as maybe sent;
// [budgetCause] as a failure of the connection, shared by its requests.
func connectionEnded(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}

func isCertificateError(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
		rerr tls.RecordHeaderError
		aerr tls.AlertError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) ||
		errors.As(err, &cerr) || errors.As(err, &rerr) || errors.As(err, &aerr)
}
