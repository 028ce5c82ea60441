// Command gateway is a small HTTP JSON API over the kubewire sandbox
// driver, with the driver's event-driven reconciler running beside it.
// Copy it as the start of a gateway.
//
//	go run ./examples/gateway -kubeconfig ~/.kube/config -namespace team-a -gateway gw-1
//
// Run as several replicas (-replicas N, N > 1), the replicas elect a leader
// on a Lease (-lease-namespace, -lease-name): every replica serves the API
// and keeps warm caches, only the leader's reconciler writes, and another
// takes over within the lease duration when it goes away. -once runs one
// reconcile pass and exits.
//
// On SIGTERM or SIGINT the gateway stops accepting connections and
// answers the requests it has accepted; then it stops the reconciler (a
// leader releases its Lease) and the driver, and exits. A request still
// unanswered -shutdown-grace (default 20s) after the signal is cut off: its
// caller gets no answer, as the gateway cannot say what became of it, and
// the gateway exits 1 saying so. Keep the grace below the pod's
// terminationGracePeriodSeconds (default 30s), with room to stop the
// reconciler.
//
// Every connection and request is bounded, so that no client holds a
// goroutine and a file descriptor of the gateway for good: a client has
// -read-timeout (default 30s) to send a request, headers and body; the
// gateway works on it for at most -request-timeout (default 50s), then
// answers 503, and must have written the answer -write-timeout (default
// 60s, more than -read-timeout and -request-timeout) after the headers
// arrived; a
// keep-alive connection waits -idle-timeout (default 120s) for its next
// request. Behind a load balancer, keep -idle-timeout above the
// balancer's own (by default 60s for AWS's ALB and for nginx), so that
// the balancer closes idle connections, never reusing one the gateway has
// just closed.
//
// Only whom the cluster lets in may call it (-authenticate, the default): a
// caller's bearer token is checked by the API server (TokenReview, for
// -token-audiences if given) and each request authorized by RBAC
// (SubjectAccessReview) for the route's verb on
// sandboxes.gateway.kubewire.io in its namespace, or get on /metrics:
// 401, 403, or 503 when the API server cannot say; answers are kept for
// 10s (auth.go, rbac/caller.yaml). Reviews of tokens the gate has not
// accepted lately are budgeted per client address (429 beyond) and in
// all (503 beyond), so that a flood of garbage tokens spends its own
// budget, not that of the callers let in (budget.go). -tls-cert-file
// and -tls-key-file serve HTTPS and are reloaded when they change. A
// -listen address other than loopback is refused unless it has both TLS
// and -authenticate, or -insecure-listen says to take the risk.
//
// The reconciler chooses its watches itself: two per namespace below 10
// namespaces, and from 10 on two for the whole cluster when RBAC allows
// it. rbac/ holds the RBAC of each; TestRBAC runs the gateway under
// exactly that.
//
// Routes, each named by the RBAC verb a caller needs for it:
//
//	GET    /v1/namespaces/{ns}/sandboxes               list
//	POST   /v1/namespaces/{ns}/sandboxes               create: {"name": "...", "podTemplate": {...}}
//	GET    /v1/namespaces/{ns}/sandboxes/{name}        get
//	POST   /v1/namespaces/{ns}/sandboxes/{name}/stop   stop
//	POST   /v1/namespaces/{ns}/sandboxes/{name}/start  start
//	DELETE /v1/namespaces/{ns}/sandboxes/{name}        delete
//	GET    /metrics                                    Prometheus metrics: kubewire's stack, the reconciler, Go runtime, process
//	GET    /healthz, /livez                            200 "ok" while the process serves; no token needed
//	GET    /readyz                                     200 "ok" once the driver's caches synced, else 503; no token needed
//
// A create's body is one JSON object of those fields, decoded as strictly
// as the API server's strict field validation would: an unknown,
// misspelled or repeated field, or anything after the object, is refused
// with 400 before anything is sent.
//
// Each call has a request ID: the caller's X-Request-Id if it sent one of
// at most 64 letters, digits, '-', '_', '.', ':' or '/', else a fresh one.
// The gateway logs it and answers with it in X-Request-Id. With
// -audit-request-id, each API request the call makes carries it as its
// Audit-ID too, so that the API server's audit log files every request of
// one call under an ID its caller knows; off by default, because a caller
// then chooses the ID its calls are audited under, another caller's
// included, and audit tools take an Audit-ID for one request's.
// -api-timeout (default 30s) bounds each attempt of an API call;
// -api-ping-after and -api-ping-timeout set the HTTP/2 health check that
// finds a dead connection to the API server (default: client-go's, about
// 45s). A gateway on a lossy network may want both lower.
//
// An error answers with the HTTP status of the driver error's kind (413
// for a request body over 1 MiB, 408 for one that did not arrive within
// -read-timeout) and a body {"kind": "...", "error": "...", "id": "..."};
// the gate's refusals have the kinds unauthenticated (401), forbidden
// (403) and unavailable (503).
// The error says what failed and, when it is the caller's to fix, why;
// never where the API server is (no URL, no address). The id, also in the
// X-Request-Id header, finds the gateway's log line with the whole chain.
//
// A request the API server's admission refuses, for an exceeded quota or
// a namespace being deleted, is answered 403 with the API server's
// reason. Its authorizer's denial of the gateway's own user (RBAC lacks a
// verb) is the gateway's to fix: 500, kind forbidden, and the message,
// which names the user, only in the log.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/examples/gateway/internal/redact"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one ends the process at once
	// instead of waiting out the shutdown.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

// run is the gateway, with args its flags: it wires the driver, the gate
// and the reconciler, serves until ctx ends, and returns the exit code: 2
// for flags or a setup it cannot use, 1 for what failed on the way.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	c, ok := parseFlags(args, stderr)
	if !ok {
		return 2
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		// The host is not known yet; mask every URL's password.
		fmt.Fprintf(stderr, "gateway: loading kubeconfig: %s\n", redact.Text(err.Error()))
		return 1
	}
	stderr = redact.Writer{W: stderr, Host: cfg.Host}
	log := logr.FromSlogHandler(slog.NewTextHandler(stderr, nil))
	reg, m, rm := newRegistry()
	// kubewire's stack, with the gateway's observer, logger and API
	// timeouts: the driver keeps a stack the config carries, and its
	// options.
	if c.auditRequestID {
		// Each API request carries its caller's request ID as its
		// Audit-ID.
		cfg.Wrap(auditIDs)
	}
	if err := kubeadapter.Apply(cfg, stackOptions(c, m, log)...); err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	d, err := driver.New(cfg, c.gateway, c.namespaces, driver.WithLogger(log))
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	defer d.Close()
	var g *gate
	if c.authenticate {
		// The reviews go through the same stack.
		var auds []string
		if c.audiences != "" {
			auds = strings.Split(c.audiences, ",")
		}
		if g, err = newGate(cfg, auds, cacheTTL, log); err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 2
		}
	}
	opts := []reconciler.Option{reconciler.WithPeriod(c.period), reconciler.WithObserver(rm), reconciler.WithQueueMetrics(rm.Queue())}
	if c.replicas > 1 {
		le := reconciler.LeaderElection{Namespace: c.leaseNS, Name: c.leaseName}
		if le.Namespace == "" {
			le.Namespace = c.namespaces[0]
		}
		if le.Name == "" {
			le.Name = c.gateway + "-reconciler"
		}
		if pod := os.Getenv("POD_NAME"); pod != "" {
			le.Identity = pod
		}
		opts = append(opts, reconciler.WithLeaderElection(le))
	}
	rec, err := reconciler.New(d, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	if c.once {
		stats, err := rec.Pass(ctx)
		log.Info("reconcile pass", "seen", stats.Seen, "actions", stats.Actions, "errors", stats.Errors)
		if err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 1
		}
		return 0
	}
	// The driver is closed (deferred) once serve has shut the server and
	// the reconciler down.
	return serve(ctx, c, newHandler(d, reg, log, g, rec.Synced), rec, log, stderr)
}

// stackOptions are the options of kubewire's stack that c's flags and the
// gateway's observer m and logger choose.
func stackOptions(c config, m *metrics.Metrics, log logr.Logger) []kubeadapter.Option {
	opts := []kubeadapter.Option{kubeadapter.WithObserver(m), kubeadapter.WithLogger(log), kubeadapter.WithTimeout(c.apiTimeout)}
	if c.pingAfter > 0 {
		opts = append(opts, kubeadapter.WithHTTP2Health(c.pingAfter, c.pingTimeout))
	}
	return opts
}
