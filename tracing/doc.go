// Package tracing turns what kubewire's stack learns about each request
// into OpenTelemetry spans, through a TracerProvider the caller gives: one
// span for each call, and under it one span for each attempt the retry
// layer made, with what only the stack knows: whether the connection was
// reused and after how long idle, the protocol, net/http's own re-send,
// why an attempt failed, why and after what backoff it was retried, and
// where its deadline ran out.
//
// The stack's packages import no telemetry library: a [Tracer] puts two
// small middleware into the stack (stack.WithCallMiddleware and
// stack.WithAttemptMiddleware), which start the spans and carry the trace
// context on each attempt's request, and feeds the spans from the
// observers of retry, pooltrace and timeout, as package metrics does.
//
// For a plain net/http client:
//
//	t, err := tracing.New(tp)
//	if err != nil {
//		return err
//	}
//	client := &http.Client{Transport: stack.New(10*time.Second, t.StackOptions()...)(base)}
//
// For client-go:
//
//	err = kubeadapter.Apply(cfg, kubeadapter.WithStackOptions(t.StackOptions()...))
//
// # Spans
//
// The call's span is an INTERNAL span named after the method ("GET"). It
// starts when the call enters the stack and ends when its response body
// is read to the end or closed, or with its error. It carries
// http.request.method, server.address and server.port,
// http.response.status_code or error.type, kubewire.attempts, an event
// "kubewire.retry" for each retry (kubewire.attempt, the failure's
// kubewire.failure.class or the status retried, kubewire.retry.backoff in
// seconds) and, when retry decided not to go on after a failure (or, for
// maybe_applied, after a refused re-sent write), kubewire.retry.stop_reason.
//
// Each attempt's span is a CLIENT span, as the HTTP client conventions
// ask of each attempt (they advise against a client span for the whole
// call). It carries the same request attributes, kubewire.attempt and,
// from the second attempt, http.request.resend_count; what pooltrace saw
// (network.protocol.version, kubewire.connection.reused,
// kubewire.connection.idle_time in seconds, kubewire.net_http.resends when
// net/http re-sent the request on a new connection by itself); the outcome
// (http.response.status_code, or error.type and kubewire.failure.class,
// the class retry.Classify gives the error, with the error, which names
// the connection, as the status description; a body that fails after the
// headers keeps the status code too);
// and kubewire.timeout.phase and kubewire.timeout.limit when its deadline
// ran out. A long-running request (a watch) has one attempt, whose span
// ends when the caller closes the stream; a caller that cancels is not an
// error (error.type "canceled", status unset). An upgrade (exec, attach,
// port-forward) carries the trace context like any request, and its spans
// end at the 101 response: the connection is then the caller's.
//
// A status of 400 or more is an error on both spans, as the conventions
// say for clients. Attributes have few values: no URL path, which names
// objects, unless [WithFullURL] asks for it.
//
// # Trace context
//
// Each attempt's request carries the attempt span's context, W3C Trace
// Context by default ([WithPropagator], [WithoutPropagation]), on a copy
// of the request's headers.
package tracing
