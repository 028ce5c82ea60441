// Package metrics turns what the kubewire stack observes into Prometheus
// metrics. It sits above the middleware: retry, pooltrace and timeout know
// nothing of Prometheus and report through their observer hooks, which a
// [Metrics] implements.
//
// Register a Metrics on your own registry and wire it in one call:
//
//	m := metrics.New()
//	reg.MustRegister(m)
//	err := kubeadapter.Apply(cfg, kubeadapter.WithObserver(m)) // client-go
//	rt := m.Stack(10 * time.Second)(base)                       // plain net/http
//
// # Metrics
//
// Every label has a bounded set of values; no metric carries a URL, path,
// host or error text. Methods other than the eight of RFC 9110 and PATCH
// are counted as "other".
//
//	kubewire_http_attempts_total{method, protocol, reused, outcome}
//	    Request attempts, one per call of the transport: protocol is
//	    "HTTP/1.1" (HTTP/1.0 included), "HTTP/2.0", "other" or "none" (no
//	    connection was obtained),
//	    reused is "true" or "false", outcome the status class ("2xx" to
//	    "5xx", "1xx" for upgrades) or "error".
//	kubewire_http_attempt_duration_seconds{method, outcome}
//	    Time to the response headers or the error, per attempt.
//	kubewire_http_connection_idle_seconds{protocol}
//	    How long a reused connection had been idle when a request took it.
//	kubewire_http_resends_total{method}
//	    Re-sends net/http made on its own: it re-sends a request that failed
//	    on a reused connection when its rules call that safe, and the server
//	    may have executed the request twice.
//	kubewire_retry_retries_total{method, class}
//	    Retries the retry middleware decided, by the class of the failure:
//	    "not_sent", "maybe_sent" or "status" (WithStatusRetry), each counted
//	    before its wait; a caller that gives up during the wait also adds a
//	    gave_up with reason "canceled" or "deadline". A retry has no reason
//	    beyond its class; reasons are why retrying stops.
//	kubewire_retry_gave_up_total{method, reason}
//	    Requests the retry middleware stopped retrying, by reason:
//	    "not_retryable", "not_idempotent" (a write that may have reached the
//	    server was not re-sent), "body_not_rewindable", "attempts",
//	    "deadline", "canceled", "budget" (the retry budget refused a
//	    retry: the server is failing many requests) and "retry_after" (a
//	    status asked for a wait longer than WithMaxRetryAfter). Budget
//	    refusals are the series with reason="budget".
//	kubewire_timeout_exceeded_total{method, phase}
//	    Requests whose timeout ran out, by where the request was: "headers",
//	    "body" or "stalled" (a long-running response made no progress).
//
// Retries under client-go are also counted in client-go's own
// rest_client_request_retries_total by kubeadapter, when a program
// registers client-go's metrics.
package metrics
