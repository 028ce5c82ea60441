// Package retry re-sends requests that failed with a transport error when
// doing so cannot duplicate a write: never a second copy of a POST or PATCH
// that may have reached the server, unless the caller said it is idempotent.
//
// # What is retried
//
// [New] classifies each transport error (no HTTP response) with [Classify]:
//
//   - [NotSent]: the request certainly did not reach the server (the dial
//     failed, the connection was refused, TLS handshake timeout, HTTP/2
//     REFUSED_STREAM or a stream the server's GOAWAY left unprocessed). Any
//     method is retried. A failure the error alone would leave [MaybeSent]
//     counts as NotSent when net/http looked for a connection for the
//     attempt and handed it none: a new connection reset in its TLS
//     handshake, as a load balancer does to those it sends to a replica
//     that died, before its health check marks the replica out. net/http
//     writes a request only to a connection it handed over; the httptrace
//     hooks (GetConn, GotConn) say which happened.
//   - [MaybeSent]: the request may have reached the server (reset, EOF,
//     timeout after writing, HTTP/2 connection lost). Only requests whose
//     second copy is harmless are retried, by the rule [WithResendable]
//     sets. The default, [IsIdempotent], is RFC 9110's: GET, HEAD, OPTIONS,
//     TRACE, PUT, DELETE, a request with an Idempotency-Key or
//     X-Idempotency-Key header, or one whose context was marked with
//     [ContextWithIdempotent]. kubeadapter installs Kubernetes' rule
//     instead (kubeadapter.Resendable): a write is re-sent only when its
//     precondition makes a second copy harmless. When a copy re-sent so is
//     refused with 404, 409, 412 or 422, the earlier copy may have been
//     applied:
//     the answer goes back to the caller, and [MaybeApplied] tells it.
//   - [NotRetryable]: anything else, including certificate errors, a
//     cancelled caller, and errors the classifier does not know. Fail closed.
//
// A request whose body cannot be rewound (a body and no GetBody) is not
// retried, nor one whose body failed: an error from the caller's own reader
// is no failure of the connection, and it comes back as a [*BodyError].
// Upgrade requests pass through untouched, and so does the
// transport.ConfigError of a middleware below built with invalid options:
// no attempt was made.
//
// HTTP responses pass through untouched by default: client-go handles 429
// and Retry-After itself, and a second layer would multiply its retries.
// [WithStatusRetry] turns on status retries for users outside client-go; a
// Retry-After longer than [WithMaxRetryAfter] (a minute by default) is not
// waited out, and the status goes back to the caller.
//
// # Time and load
//
// Waits between attempts are exponential with full jitter ([FullJitter]),
// kept per request. No wait runs past the context deadline: when the next
// wait would end after it, the request fails at once with an error that
// matches context.DeadlineExceeded.
//
// # The retry budget
//
// A retry budget shared by all requests through one middleware
// ([WithBudget]) is a token bucket: every request adds ratio tokens (0.2),
// time adds floor tokens a second (10), the balance starts at the floor and
// is capped at ten seconds of floor (100), and a retry takes a token. A
// retry refused for want of a token fails with [ReasonBudget]. What a retry
// costs depends on what failed:
//
//   - The request never reached a server: a dial refused, unreachable or
//     timed out before connecting, a temporary DNS failure, HTTP/2
//     REFUSED_STREAM, a stream above the last stream ID of the server's
//     GOAWAY. No token, as in gRPC's transparent retry: the retry adds no
//     load.
//   - The connection was lost under the request: reset, EOF, broken pipe,
//     "http2: client connection lost" or "force closed", a GOAWAY followed
//     by the close. Over HTTP/2 this fails every request on the connection
//     at once, and they share one token: the first to fail takes it and
//     opens an event for that connection, the others join the event for
//     ten seconds. A request shares a token once; if its retry fails too,
//     later retries pay their own.
//   - Anything else is the request's own failure, one token per retry: a
//     stream reset, an attempt timeout, a connection reset before it
//     carried the request (no connection was handed to it: the server, or
//     a load balancer, accepted it and did a handshake), a status retried
//     by [WithStatusRetry].
//
// When the request's context has a deadline, a request that certainly did
// not reach the server ([NotSent]) is sent again past [WithMaxAttempts]
// while the deadline allows, each retry past the bound taking a token: a
// server restarting behind its address refuses connections for seconds,
// and a load balancer resets the connections it sends to a dead replica
// for as long as its health check takes, longer than three quick attempts
// last; a caller whose deadline outlasts the gap loses nothing. Without a
// deadline, WithMaxAttempts bounds it.
//
// The connection comes from net/http itself. When pooltrace is below this
// middleware (the recommended order, and kubeadapter's; found through
// wrappers that have WrappedRoundTripper), its error names the connection
// the attempt failed on. Otherwise the middleware adds its own
// httptrace.ClientTrace to each request's context, composed with any trace
// already there (client-go's), and its GotConn hook names the connection.
// Either way an event is keyed by the connection's addresses and the
// identity of its net.Conn, so that the connections of a unix socket, which
// share their addresses, are told apart. No event holds a reference to its
// connection.
// Events are kept only on the failure path, under the budget's lock; a
// request that succeeds costs one locked addition, and the trace hook when
// there is no pooltrace below. [WithoutBudget] removes both.
//
// With the default budget:
//
//   - One connection lost with every request of a client in flight on it,
//     however many: one token. Every idempotent request is retried once;
//     a client with no history can lose ten connections at once, and the
//     floor pays for ten more each second.
//   - Two connections lost a second apart: two tokens.
//   - A server that is down (connection refused): each request makes
//     [DefaultMaxAttempts] dials for no token, then, if its context has a
//     deadline, one dial per token until the deadline or the budget ends
//     it; the floor pays for ten such dials a second across all requests.
//   - A server that resets every new connection, or fails request after
//     request: one token per retry (a request with a deadline keeps trying
//     while tokens last, if the resets come before it was written). N
//     requests over t seconds make at most (1+ratio)*N + floor*(1+t)
//     attempts.
//   - The worst case, a server that takes requests on every new connection
//     and then drops it under them: each request retries once on a shared
//     token and pays for any further retry, so at most (2+ratio)*N +
//     floor*(1+t) attempts, and never more than [DefaultMaxAttempts]*N.
//
// net/http already re-sends replayable requests that fail on a reused
// connection and HTTP/2 re-sends refused streams; keep the attempt count
// low ([DefaultMaxAttempts]). client-go re-sends GETs on connection resets
// too, but not on top of this middleware when kubeadapter installs it (see
// kubeadapter.Error).
//
// # Observing
//
// [WithObserver] reports every [Decision]: each retry, with the class of
// the failure or the status, before its wait, and the end of retrying with
// its [Reason].
// Budget refusals are the decisions whose Reason is [ReasonBudget]. A
// request that succeeds at once reports nothing and costs nothing more.
//
// # Composition
//
// Put the timeout middleware inside retry for a timeout per attempt, and give
// the caller's context a deadline for the whole call:
//
//	transport.Chain(retry.New(), pooltrace.New(), timeout.New(10*time.Second))
//
// net/http re-sends by itself a write that carries an Idempotency-Key or
// X-Idempotency-Key header when a reused connection fails after the write
// was sent. New holds that to its resend rule ([WithResendable]) for the
// headers a request carries when it reaches New. A middleware below New
// that sets one of those headers needs [NoReplay], given New's options,
// right above the base transport, below that middleware; package stack
// puts it there:
//
//	transport.Chain(retry.New(opts...), setsKey, pooltrace.New(), timeout.New(10*time.Second), retry.NoReplay(opts...))
//
// # Errors
//
// When a request fails, the error is a [*Error] that keeps every attempt's
// cause (errors.Is and errors.As search all of them), the number of attempts
// and the [Reason] retrying stopped.
package retry
