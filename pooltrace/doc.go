// Package pooltrace records, for every request attempt, which pooled
// connection carried it and how long that connection had been idle, logs it,
// and attaches it to errors, so that a timeout says which connection it died
// on.
//
// # What is recorded
//
// [New] installs an httptrace.ClientTrace on each request (composed with any
// trace already in the context, such as client-go's) and fills an [Attempt]:
// whether the connection was reused, whether it was idle and for how long,
// the protocol, the local and remote address, and when the connection was
// handed over. The timing of dial, TLS handshake, request written and first
// response byte is recorded too when something will read it: an observer,
// or a logger that logs every attempt. Errors always carry the connection.
//
// The connection facts mean different things on the two protocols:
//
//   - HTTP/1.1: Reused means the connection came from the idle pool and had
//     carried an earlier request; WasIdle is true for every reused
//     connection; IdleTime is how long it sat in the pool. A connection
//     carries one request at a time.
//   - HTTP/2: Reused means the connection had carried an earlier stream;
//     WasIdle means no other stream was open on it at the moment;
//     IdleTime is the time since its last stream ended (zero while other
//     streams are open). Many requests share one connection, so an error
//     that kills the connection fails all of them.
//
// net/http re-sends an idempotent request on a new connection when it fails
// on a reused one; such a request reports more than one connection
// ([Attempt.Earlier]), and the middleware logs it, because the server then
// executed the request twice.
//
// # Logging
//
// One structured line per attempt through logr at [WithVerbosity] (default
// 4), with the logger from the request's context if there is one, else
// [WithLogger]'s. A request that fails on a reused connection, or that net/http
// re-sent, is logged at V(0); logr has no warning level and V(0) is the one
// shown by default. Header values are never logged, nor the query string:
// Authorization, cookies and tokens do not reach the output.
//
// # Errors
//
// An error leaving the middleware, from RoundTrip or from reading the
// response body, is an [*Error] that carries the [Attempt] and wraps the
// original error, so errors.Is and errors.As still find the root cause. Its
// message reads like "on connection reused after 29.8s idle (HTTP/1.1
// 127.0.0.1:51234->127.0.0.1:6443): read tcp ...: i/o timeout".
// The retry middleware above reads the failed connection from it
// ([Error.FailedConn]), so that the requests one lost connection failed
// share a retry token, and adds no trace of its own.
package pooltrace
