// Package timeout bounds each HTTP request with a deadline that starts when
// the request is handed to the transport and ends when its response body is
// closed or read to EOF.
//
// # Why not a read timeout on the connection
//
// A read deadline set on a pooled connection counts the time the connection
// sat idle: net/http keeps a Read pending on every idle HTTP/1 connection, so
// a request sent on a connection idle for T seconds gets only d-T seconds.
// GETs then fail and are silently re-sent by net/http, and PATCH, POST and
// DELETE fail outright on a healthy server. The deadline of [New] belongs to
// the request, not the connection: a request on a connection that sat idle
// for any time gets the whole timeout.
//
// # What the timeout covers
//
// For an ordinary request the timeout covers waiting for response headers
// and reading the body; a body that trickles is cut when the timeout runs
// out.
// Long-running requests, as reported by the classifier ([LongRunning] by
// default, replaceable with [WithLongRunning]), are bounded only until the
// response headers arrive; while their body is read an optional no-progress
// watchdog ([WithStallTimeout], off by default) cuts a stream that has been
// silent for too long. An upgrade (101 Switching Protocols) keeps its
// io.ReadWriteCloser body.
//
// The caller's context deadline, when it is sooner than the timeout, wins
// and its error is returned unchanged. [ContextWithTimeout] overrides the
// timeout for one call and [ContextWithoutTimeout] removes it for one call.
//
// # Errors
//
// When the timeout runs out, RoundTrip or the body's Read returns an
// [*Error] that records the timeout ([Error.Limit]), the elapsed time and
// the [Phase]. It matches context.DeadlineExceeded with errors.Is and
// reports Timeout() true, also through the *url.Error of http.Client.
//
// # Configuration errors
//
// New cannot return an error, so an invalid timeout or option makes every
// request through the middleware fail with an error that names the setting
// and its value; nothing is sent. Validate with [Check] at start-up.
package timeout
