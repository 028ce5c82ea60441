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
//     method is retried.
//   - [MaybeSent]: the request may have reached the server (reset, EOF,
//     timeout after writing, HTTP/2 connection lost). Only idempotent
//     requests are retried: GET, HEAD, OPTIONS, TRACE, PUT, DELETE, a request
//     with an Idempotency-Key or X-Idempotency-Key header, or one whose
//     context was marked with [WithIdempotent].
//   - [NotRetryable]: anything else, including certificate errors, a
//     cancelled caller, and errors the classifier does not know. Fail closed.
//
// A request whose body cannot be rewound (a body and no GetBody) is not
// retried. Upgrade requests pass through untouched.
//
// HTTP responses pass through untouched by default: client-go handles 429
// and Retry-After itself, and a second layer would multiply its retries.
// [WithStatusRetry] turns on status retries for users outside client-go.
//
// # Time and load
//
// Waits between attempts are exponential with full jitter ([FullJitter]),
// kept per request. No wait runs past the context deadline: when the next
// wait would end after it, the request fails at once with an error that
// matches context.DeadlineExceeded. A retry budget shared by all requests
// through one middleware ([WithBudget]) limits retries to a fraction of
// recent requests plus a small floor per second, so a failing server sees
// about 1.2 times its normal load, not three times.
//
// net/http already re-sends replayable requests that fail on a reused
// connection, HTTP/2 re-sends refused streams, and client-go re-sends GETs
// on connection resets; keep the attempt count low ([DefaultMaxAttempts]).
//
// # Composition
//
// Put the timeout middleware inside retry for a budget per attempt, and give
// the caller's context a deadline for the whole call:
//
//	transport.Chain(retry.New(), pooltrace.New(), timeout.New(10*time.Second))
//
// # Errors
//
// When a request fails, the error is a [*Error] that keeps every attempt's
// cause (errors.Is and errors.As search all of them), the number of attempts
// and the [Reason] retrying stopped.
package retry
