// Package kubeadapter installs the kubewire stack on a client-go
// rest.Config in one call, and is the only kubewire package that knows
// client-go.
//
// # What Apply changes
//
// [Apply] adds to rest.Config.WrapTransport one wrapper that is outermost
// among the config's own wrappers, where rest.Config.Wrap would put it, and
// innermost under client-go's auth, user agent and impersonation layers, so
// it sees final requests right above the shared base transport, which it
// never mutates. Inside it, outermost first:
//
//   - retry.New: transport errors are retried when that cannot duplicate a
//     write, by Kubernetes' rules ([Resendable]) rather than RFC 9110's
//     methods: a request that may have reached the API server is sent
//     again only when it reads, or when its own precondition makes a
//     second copy harmless (an update or merge patch naming
//     metadata.resourceVersion, a JSON patch testing it first, a delete
//     with preconditions, a server-side apply without force), or its
//     context is marked with
//     retry.ContextWithIdempotent. A create, an update without
//     resourceVersion or a delete without preconditions is sent once.
//     HTTP responses pass through to client-go untouched (client-go
//     handles 429 and Retry-After itself), except one: a copy sent again
//     and refused with 409 Conflict, 404 Not Found or 422 (a JSON patch
//     whose test fails), which the earlier copy may have caused by being
//     applied, keeps its status and reason (apierrors.IsConflict,
//     IsNotFound and IsInvalid hold) and its message says the earlier
//     copy may have been applied.
//   - pooltrace.New: connection reuse and idle time for every attempt, in
//     the logs and in every error.
//   - timeout.New: a timeout per attempt that starts when the request is
//     sent and covers the response body.
//   - retry.NoReplay, with the retry layer's rule: net/http re-sends by
//     itself a write that carries an Idempotency-Key or X-Idempotency-Key
//     header, which the API server ignores, when a reused connection
//     fails after the write was sent. The guard keeps it from sending a
//     second copy of a write [Resendable] refuses when the header was set
//     below the retry layer, by an attempt middleware
//     (stack.WithAttemptMiddleware); the retry layer does the same for a
//     header set above it.
//
// The config's own wrappers stay below the stack, in their order, over the
// base transport itself (some assert *http.Transport): the guard cannot go
// under them. A config whose wrappers set one of those headers puts
// [NoReplay] under them.
//
// Long-running requests (watch, log follow, exec, attach, portforward,
// proxy, upgrades; timeout.LongRunning) are exempt from retries and bounded
// only until their response headers. A long-running body that ends short
// reads io.ErrUnexpectedEOF itself, not pooltrace's annotation of it:
// client-go's watch decoder compares the error by identity, and on it an
// informer watches again from the last resourceVersion it saw instead of
// listing everything again.
//
// A request meets one stack however often the config was applied: Apply
// finds its own wrapper without running the config's wrappers, and where a
// wrapper added in between hides it, only the outermost stack acts (see
// [Apply]).
//
// # One retry layer
//
// client-go re-sends a GET whose error looks like a lost connection
// (apimachinery's IsConnectionReset, IsProbableEOF, IsHTTP2ConnectionLost)
// up to ten times, a second apart. Under the stack that would multiply:
// each of client-go's rounds would run all of kubewire's attempts. The
// stack therefore hands client-go the error of a request it retried and
// gave up on (or did not retry because the retry budget refused) as an
// [*Error], which client-go's checks do not take for a lost connection,
// so client-go does not start another round: a GET is attempted at most
// retry.DefaultMaxAttempts times in all, where stock client-go attempts it
// eleven times over ten seconds. errors.As still finds the *retry.Error
// and the type of every cause but syscall.Errno, and errors.Is sees every
// cause (see [Error]). Responses are client-go's business as before: it honours 429
// and Retry-After itself. With retries off
// (WithRetryOptions(retry.WithMaxAttempts(1))), client-go retries as it
// does without kubewire.
//
// What this means for an API server restart: with the defaults, a request
// whose context has a deadline rides out refused connections (a request
// that reached no server, whatever its verb) until the deadline, a dial
// per retry token past the first three attempts; a GET rides out at most
// 0.3s of reset connections (full-jitter waits of up to 100ms and then
// 200ms; about 0.15s on average), then fails, and so does a refused
// request without a deadline. Stock client-go rides out 10s of resets, but
// no refused connection: it does not retry a refused connection at all.
// To ride out longer resets, raise the attempts, for example
// WithRetryOptions(retry.WithMaxAttempts(6)):
// waits of up to 0.1, 0.2, 0.4, 0.8 and 1.6s, at most 3.1s in all and about
// 1.5s on average, within the caller's deadline; the retry budget keeps a
// failing server from seeing more than about 1.2 times the requests plus 10
// per second.
//
// Each retry is also reported to client-go's rest_client_request_retries_total
// (k8s.io/client-go/tools/metrics.RequestRetry), with the labels client-go
// gives its own retries (code "<error>" or the status, the method, the
// host), so dashboards built on client-go's metrics count them. It does
// nothing unless the program registers client-go's metrics (for example
// through k8s.io/component-base/metrics/prometheus/restclient).
//
// # Observing
//
// [WithObserver] hands every attempt, retry decision and timeout that ran
// out to an [Observer]; the metrics package's Metrics turns them into
// Prometheus metrics:
//
//	m := metrics.New()
//	registry.MustRegister(m)
//	if err := kubeadapter.Apply(cfg, kubeadapter.WithObserver(m)); err != nil {
//		return err
//	}
//
// Apply moves rest.Config.Timeout into the per-attempt timeout and sets it
// to zero:
// client-go turns Timeout into http.Client.Timeout, which bounds the whole
// body of every request and so cuts every watch and log stream after
// Timeout (kubernetes#23899). The timeout is per attempt; a caller's context
// deadline still bounds a whole call.
//
// # Idle timeout and HTTP/2 health checks per client
//
// client-go closes idle pooled connections after 90s, for every client of
// the process; load balancers drop idle flows after 35s to 350s.
// [WithIdleConnTimeout] sets the idle timeout for one config, and
// `kubewire probe` names it with the value it measured.
//
// client-go reads the HTTP/2 health-check timings from the environment
// (HTTP2_READ_IDLE_TIMEOUT_SECONDS, HTTP2_PING_TIMEOUT_SECONDS) for every
// client of the process. [WithHTTP2Health] sets them for one config. Either
// option gives the config's clients their own clone of client-go's base
// transport, which keeps its
// TLS settings (CA, client certificates, server name), its dialer and
// proxy, and so keeps exec credential plugins, which rotate client
// certificates through them, working. The clone speaks net/http's own
// HTTP/2 with the timings in http.Transport.HTTP2, which works the same on
// Go 1.26 and 1.27 (where x/net/http2's ConfigureTransports, which client-go
// calls, became a wrapper over net/http). When a clone cannot apply, Apply
// returns an error saying why (see [WithHTTP2Health]).
package kubeadapter
