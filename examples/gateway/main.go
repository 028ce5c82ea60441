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
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/examples/gateway/internal/redact"
	"github.com/kubewire/kubewire/kubeadapter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one ends the process at once
	// instead of waiting out the shutdown.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the API on")
	gateway := fs.String("gateway", "gateway", "this gateway's name, a label value")
	namespaces := fs.String("namespace", "default", "comma-separated namespaces the gateway manages")
	period := fs.Duration("period", 10*time.Minute, "resync period of the reconciler (jittered); events drive it")
	replicas := fs.Int("replicas", 1, "how many replicas of this gateway run; above 1, they elect a leader")
	leaseNS := fs.String("lease-namespace", "", "namespace of the leader election Lease (default: the first -namespace in sorted order)")
	leaseName := fs.String("lease-name", "", "name of the leader election Lease (default: <gateway>-reconciler)")
	once := fs.Bool("once", false, "run one reconcile pass and exit")
	grace := fs.Duration("shutdown-grace", defaultShutdownGrace, "on SIGTERM or SIGINT, how long requests in flight have to be answered before they are cut off")
	readTimeout := fs.Duration("read-timeout", defaultReadTimeout, "how long a client has to send a whole request, headers and body")
	requestTimeout := fs.Duration("request-timeout", defaultRequestTimeout, "how long the gateway works on a request, its API server calls included, before it answers 503; less than -write-timeout")
	writeTimeout := fs.Duration("write-timeout", defaultWriteTimeout, "how long the gateway has, from the end of a request's headers, to write the whole answer")
	idleTimeout := fs.Duration("idle-timeout", defaultIdleTimeout, "how long a keep-alive connection may wait for its next request; above the idle timeout of a load balancer in front")
	authenticate := fs.Bool("authenticate", true, "let in only callers whose bearer token the API server accepts (TokenReview) and whom RBAC allows the route's verb on sandboxes."+apiGroup+" in its namespace (SubjectAccessReview); off, whoever reaches the gateway acts with its rights")
	tlsCert := fs.String("tls-cert-file", "", "serve HTTPS with this certificate (PEM), reloaded when the file changes; with -tls-key-file")
	tlsKey := fs.String("tls-key-file", "", "the private key (PEM) of -tls-cert-file")
	audiences := fs.String("token-audiences", "", "comma-separated audiences a caller's token must be issued for (kubectl create token --audience); default: the API server's, so that a caller's token also works against the API server")
	insecureListen := fs.Bool("insecure-listen", false, "serve a -listen address other than loopback without TLS or without -authenticate: whoever on the network reaches it reads the traffic, or acts with the gateway's rights")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		fmt.Fprintf(stderr, "gateway: -tls-cert-file %q and -tls-key-file %q go together\n", *tlsCert, *tlsKey)
		return 2
	}
	if loopback, err := isLoopback(*listen); err != nil {
		fmt.Fprintf(stderr, "gateway: -listen %q: %v\n", *listen, err)
		return 2
	} else if !loopback && (*tlsCert == "" || !*authenticate) && !*insecureListen {
		fmt.Fprintf(stderr, "gateway: -listen %s is not a loopback address: serve it with -tls-cert-file, -tls-key-file and -authenticate, or say -insecure-listen to let whoever reaches it read the traffic or act with the gateway's rights\n", *listen)
		return 2
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"shutdown-grace", *grace}, {"read-timeout", *readTimeout}, {"request-timeout", *requestTimeout}, {"write-timeout", *writeTimeout}, {"idle-timeout", *idleTimeout}} {
		if f.d <= 0 {
			fmt.Fprintf(stderr, "gateway: -%s must be positive, got %v\n", f.name, f.d)
			return 2
		}
	}
	if *readTimeout >= *writeTimeout {
		// A body that stops coming is answered 408 when -read-timeout,
		// counted from the request's first byte, runs out; -write-timeout,
		// counted from the end of its headers, must not have run out by
		// then, or the 408 cannot be written: its caller sees the
		// connection closed.
		fmt.Fprintf(stderr, "gateway: -read-timeout %v must be less than -write-timeout %v\n", *readTimeout, *writeTimeout)
		return 2
	}
	if *requestTimeout >= *writeTimeout {
		// Else a request that runs out of time has no time left to be
		// answered: its caller sees the connection cut, not a 503.
		fmt.Fprintf(stderr, "gateway: -request-timeout %v must be less than -write-timeout %v\n", *requestTimeout, *writeTimeout)
		return 2
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		// The host is not known yet; mask every URL's password.
		fmt.Fprintf(stderr, "gateway: loading kubeconfig: %s\n", redact.Text(err.Error()))
		return 1
	}
	stderr = redact.Writer{W: stderr, Host: cfg.Host}
	log := logr.FromSlogHandler(slog.NewTextHandler(stderr, nil))
	reg, m, rm := newRegistry()
	// kubewire's stack, with the gateway's observer and logger: the
	// driver keeps a stack the config carries, and its options.
	if err := kubeadapter.Apply(cfg, kubeadapter.WithObserver(m), kubeadapter.WithLogger(log)); err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	// Sorted, as the driver keeps them, so that replicas given the same
	// namespaces in another order agree on the Lease's.
	nss := slices.Compact(slices.Sorted(slices.Values(strings.Split(*namespaces, ","))))
	d, err := driver.New(cfg, *gateway, nss, driver.WithLogger(log))
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 2
	}
	defer d.Close()
	var g *gate
	if *authenticate {
		// The reviews go through the same stack.
		var auds []string
		if *audiences != "" {
			auds = strings.Split(*audiences, ",")
		}
		if g, err = newGate(cfg, auds, cacheTTL, log); err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 2
		}
	}
	opts := []reconciler.Option{reconciler.WithPeriod(*period), reconciler.WithObserver(rm), reconciler.WithQueueMetrics(rm.Queue())}
	if *replicas > 1 {
		le := reconciler.LeaderElection{Namespace: *leaseNS, Name: *leaseName}
		if le.Namespace == "" {
			le.Namespace = nss[0]
		}
		if le.Name == "" {
			le.Name = *gateway + "-reconciler"
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
	if *once {
		stats, err := rec.Pass(ctx)
		log.Info("reconcile pass", "seen", stats.Seen, "actions", stats.Actions, "errors", stats.Errors)
		if err != nil {
			fmt.Fprintf(stderr, "gateway: %v\n", err)
			return 1
		}
		return 0
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 1
	}
	// ctx ends on SIGTERM or SIGINT, or when the reconciler stops on its
	// own; either way the gateway shuts down.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests' contexts end only when the gateway cuts them off, not
	// on SIGTERM, which Shutdown lets them finish.
	base, cutOff := context.WithCancel(context.WithoutCancel(ctx))
	defer cutOff()
	srv := &http.Server{
		Handler:           withTimeout(newHandler(d, reg, log, g, rec.Synced), *requestTimeout),
		ReadHeaderTimeout: min(*readTimeout, 10*time.Second),
		ReadTimeout:       *readTimeout,
		WriteTimeout:      *writeTimeout,
		IdleTimeout:       *idleTimeout,
		// net/http's own lines (a failed TLS handshake) through the
		// same redaction as the gateway's.
		ErrorLog:    stdlog.New(stderr, "gateway: http: ", 0),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	certErr := make(chan error, 1)
	if *tlsCert != "" {
		// Reloaded when the files change (fsnotify, and a poll every
		// 10s), so that a rotated certificate is served without a restart.
		cw, err := certwatcher.New(*tlsCert, *tlsKey)
		if err != nil {
			_ = ln.Close()
			fmt.Fprintf(stderr, "gateway: -tls-cert-file %q, -tls-key-file %q: %v\n", *tlsCert, *tlsKey, err)
			return 2
		}
		crlog.SetLogger(log)
		watched := make(chan struct{})
		defer func() {
			cancel()
			<-watched
		}()
		go func() {
			defer close(watched)
			if err := cw.Start(ctx); err != nil && ctx.Err() == nil {
				// A certificate no longer watched would be served until
				// it expires: stop, as controller-runtime's manager does.
				certErr <- err
				cancel()
			}
		}()
		srv.TLSConfig = &tls.Config{GetCertificate: cw.GetCertificate, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	// The reconciler starts last, once nothing can fail before the server
	// runs, so that every error path above returns with nothing running.
	// It has a context of its own, ended once the HTTP server has shut
	// down: the gateway keeps reconciling while it answers what it
	// accepted, and closes the driver last.
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRec()
	reconciled := make(chan error, 1)
	go func() {
		err := rec.Run(recCtx)
		if recCtx.Err() == nil {
			log.Error(err, "reconciler stopped")
			cancel()
		}
		reconciled <- err
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The address as bound: with port 0, the one the system chose.
	log.Info("serving", "addr", ln.Addr().String(), "namespaces", nss, "tls", *tlsCert != "", "authenticate", *authenticate)
	code := 0
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	// Stop accepting, answer what was accepted, then stop the reconciler
	// and (deferred) the driver: main exits as soon as run returns.
	log.Info("shutting down", "grace", grace.String())
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), *grace)
	err = srv.Shutdown(shutdown)
	cancelShutdown()
	if err != nil {
		// Their callers get no answer: not a success the gateway could
		// not confirm.
		_ = srv.Close()
		cutOff()
		fmt.Fprintf(stderr, "gateway: shutdown: -shutdown-grace %v ran out; cut off the requests still in flight, unanswered\n", *grace)
		code = 1
	}
	if serveErr == nil {
		serveErr = <-served
	}
	select {
	case err := <-certErr:
		fmt.Fprintf(stderr, "gateway: watching -tls-cert-file %q: %v\n", *tlsCert, err)
		code = 1
	default:
	}
	if !errors.Is(serveErr, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "gateway: %v\n", serveErr)
		code = 1
	}
	stopRec()
	if err := <-reconciled; !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "gateway: reconciler: %v\n", err)
		code = 1
	}
	return code
}

// The defaults of the gateway's timeouts.
const (
	// defaultShutdownGrace is below Kubernetes' default
	// terminationGracePeriodSeconds (30s), leaving time to stop the
	// reconciler, which releases its Lease, before the kubelet kills the
	// pod.
	defaultShutdownGrace = 20 * time.Second
	// defaultReadTimeout lets a slow client send the largest body, 1 MiB,
	// at about 280 kbit/s.
	defaultReadTimeout = 30 * time.Second
	// defaultRequestTimeout leaves room for an API call that runs into
	// kubeadapter's per-attempt timeout (30s) and then its retry, or for
	// an operation of several calls.
	defaultRequestTimeout = 50 * time.Second
	// defaultWriteTimeout leaves 10s after -request-timeout to write the
	// answer.
	defaultWriteTimeout = 60 * time.Second
	// defaultIdleTimeout is above the default idle timeouts of common load
	// balancers and proxies (60s for AWS's ALB and nginx), so that they,
	// not the gateway, close an idle connection: closed by the gateway, it
	// may be reused by the balancer at that very moment.
	defaultIdleTimeout = 120 * time.Second
)

// isLoopback reports whether the host of addr, a -listen address, is a
// loopback one: localhost or an IP of 127.0.0.0/8 or ::1. An empty host
// is every address.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// withTimeout gives each request's context a deadline d away, which ends
// the driver's calls for it: an operation that runs out of time is
// answered 503 (kind unavailable) before -write-timeout cuts the
// connection.
func withTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
