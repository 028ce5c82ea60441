// Package kubeadapter installs the kubewire stack on a client-go
// rest.Config in one call, and is the only kubewire package that knows
// client-go.
//
// # What Apply changes
//
// [Apply] adds, through rest.Config.Wrap, one wrapper that is outermost among
// the config's own wrappers and innermost under client-go's auth, user agent
// and impersonation layers, so it sees final requests right above the
// shared base transport, which it never mutates. Inside it, outermost first:
//
//   - retry.New: transport errors are retried when that cannot duplicate a
//     write (a request marked with retry.WithIdempotent in its context,
//     such as a stop or a delete, counts as idempotent). HTTP responses
//     pass through to client-go untouched: client-go handles 429 and
//     Retry-After itself.
//   - pooltrace.New: connection reuse and idle time for every attempt, in
//     the logs and in every error.
//   - timeout.New: a budget per attempt that starts when the request is sent
//     and covers the response body.
//
// Long-running requests (watch, log follow, exec, attach, portforward,
// proxy, upgrades; timeout.LongRunning) are exempt from retries and bounded
// only until their response headers.
//
// Apply moves rest.Config.Timeout into the budget and sets it to zero:
// client-go turns Timeout into http.Client.Timeout, which bounds the whole
// body of every request and so cuts every watch and log stream after
// Timeout (kubernetes#23899). The budget is per attempt; a caller's context
// deadline still bounds a whole call.
//
// # HTTP/2 health checks per client
//
// client-go reads the HTTP/2 health-check timings from the environment
// (HTTP2_READ_IDLE_TIMEOUT_SECONDS, HTTP2_PING_TIMEOUT_SECONDS) for every
// client of the process. [WithHTTP2Health] sets them for one config: the
// client gets its own clone of client-go's base transport, which keeps its
// TLS settings (CA, client certificates, server name), its dialer and
// proxy, and so keeps exec credential plugins, which rotate client
// certificates through them, working. The clone speaks net/http's own
// HTTP/2 with the timings in http.Transport.HTTP2, which works the same on
// Go 1.26 and 1.27 (where x/net/http2's ConfigureTransports, which client-go
// calls, became a wrapper over net/http). When the health check cannot
// apply, Apply returns an error saying why (see [WithHTTP2Health]).
package kubeadapter
