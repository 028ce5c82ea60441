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
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	kjson "sigs.k8s.io/json"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/drivermetrics"
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

// sandbox is the JSON view of a driver.Sandbox.
type sandbox struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	Phase           string `json:"phase"`
	Reason          string `json:"reason,omitempty"`
	Message         string `json:"message,omitempty"`
	Running         bool   `json:"running"`
	FenceUID        string `json:"fenceUID,omitempty"`
	FenceGeneration int64  `json:"fenceGeneration,omitempty"`
}

func view(s driver.Sandbox) sandbox {
	return sandbox{
		Namespace: s.Namespace, Name: s.Name, UID: string(s.UID),
		Phase: string(s.Phase), Reason: s.Reason, Message: s.Message, Running: s.Running, FenceUID: string(s.FenceUID), FenceGeneration: s.FenceGeneration,
	}
}

// newRegistry returns the registry /metrics serves, with the stack's and
// the reconciler's metrics registered on it.
func newRegistry() (*prometheus.Registry, *metrics.Metrics, *drivermetrics.Metrics) {
	reg := prometheus.NewRegistry()
	m, rm := metrics.New(), drivermetrics.New()
	reg.MustRegister(m, rm, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, m, rm
}

// newHandler serves the routes of d, and reg's metrics, to the callers g
// lets in (everyone if g is nil), and the health checks to everyone: ready
// reports whether the driver's caches have synced (nil: always). It logs
// each error answer's whole chain on log.
func newHandler(d *driver.Driver, reg prometheus.Gatherer, log logr.Logger, g *gate, ready func() bool) http.Handler {
	respond := func(w http.ResponseWriter, r *http.Request, code int, body any, err error) {
		if err != nil {
			fail(w, r, log, err)
			return
		}
		reply(w, code, body)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.authorizePath(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	one := func(f func(context.Context, string, string) (driver.Sandbox, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s, err := f(r.Context(), r.PathValue("ns"), r.PathValue("name"))
			respond(w, r, http.StatusOK, view(s), err)
		}
	}
	mux.Handle("GET /v1/namespaces/{ns}/sandboxes", g.authorize("list", func(w http.ResponseWriter, r *http.Request) {
		list, err := d.List(r.Context(), r.PathValue("ns"))
		out := make([]sandbox, 0, len(list))
		for _, s := range list {
			out = append(out, view(s))
		}
		respond(w, r, http.StatusOK, out, err)
	}))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes", g.authorize("create", func(w http.ResponseWriter, r *http.Request) {
		req, err := decodeCreate(r.PathValue("ns"), http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			respond(w, r, 0, nil, err)
			return
		}
		s, err := d.Create(r.Context(), r.PathValue("ns"), req.Name, req.PodTemplate)
		respond(w, r, http.StatusCreated, view(s), err)
	}))
	mux.Handle("GET /v1/namespaces/{ns}/sandboxes/{name}", g.authorize("get", one(d.Get)))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes/{name}/stop", g.authorize("stop", one(d.Stop)))
	mux.Handle("POST /v1/namespaces/{ns}/sandboxes/{name}/start", g.authorize("start", one(d.Start)))
	mux.Handle("DELETE /v1/namespaces/{ns}/sandboxes/{name}", g.authorize("delete", func(w http.ResponseWriter, r *http.Request) {
		err := d.Delete(r.Context(), r.PathValue("ns"), r.PathValue("name"))
		respond(w, r, http.StatusNoContent, nil, err)
	}))
	top := http.NewServeMux()
	// A kubelet's probes carry no token: the health checks answer anyone,
	// and say no more than whether the gateway serves (healthz, livez) or
	// is ready to (readyz).
	alive := func(w http.ResponseWriter, _ *http.Request) { health(w, true) }
	top.HandleFunc("GET /healthz", alive)
	top.HandleFunc("GET /livez", alive)
	top.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { health(w, ready == nil || ready()) })
	top.Handle("/", checkPath(log, g.authenticate(mux)))
	return top
}

// health answers a health check: 200 "ok", or 503 "not ready".
func health(w http.ResponseWriter, ok bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// checkPath answers 400 a request whose path names a namespace or a
// sandbox that cannot exist, before any review is sent for it: a namespace
// is a DNS label, and so is a sandbox's name. It reads the path as the
// routes do, segment by segment, each unescaped.
func checkPath(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/namespaces/")
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		segs := strings.Split(rest, "/")
		fields := []struct{ field, value string }{{"namespace", segs[0]}}
		if len(segs) >= 3 && segs[1] == "sandboxes" {
			fields = append(fields, struct{ field, value string }{"sandbox name", segs[2]})
		}
		for _, f := range fields {
			v, err := url.PathUnescape(f.value)
			if err == nil {
				if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
					err = errors.New(errs[0])
				}
			}
			if err != nil {
				msg := fmt.Sprintf("%s %s in the path is not a DNS label: %v", f.field, quoteValue(f.value), err)
				refuse(w, r, log, http.StatusBadRequest, kindInvalid, msg, errors.New(msg))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxQuoted is how much of a value an error or a log line quotes.
const maxQuoted = 64

// quoteValue quotes v, cut to its first maxQuoted bytes and its length
// when it is longer: a path of a megabyte is not copied into every answer
// and log line.
func quoteValue(v string) string {
	if len(v) <= maxQuoted {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(v[:maxQuoted]), len(v))
}

// logPath is the request's path for a log line, cut as quoteValue cuts.
func logPath(r *http.Request) string {
	if p := r.URL.Path; len(p) > 4*maxQuoted {
		return fmt.Sprintf("%s... (%d bytes)", p[:4*maxQuoted], len(p))
	}
	return r.URL.Path
}

// maxBody is the largest request body the gateway reads: 1 MiB.
const maxBody = 1 << 20

// createRequest is the body of a create.
type createRequest struct {
	Name        string                     `json:"name"`
	PodTemplate sandboxv1beta1.PodTemplate `json:"podTemplate"`
}

// decodeCreate reads the body of a create in namespace ns. The body must
// be one JSON object with only createRequest's fields, each spelled as its
// tag (case-sensitive, as the API server's strict decoding is) and given
// once, with nothing but white space after it. A body it refuses is an
// error of kind [driver.KindInvalidArgument] naming the problem; one cut
// off by [http.MaxBytesReader] keeps its [*http.MaxBytesError], which
// [statusOf] answers with 413, and one that could not be read is a
// [*bodyError].
func decodeCreate(ns string, body io.Reader) (createRequest, error) {
	req, err := decodeStrict(body)
	if err != nil {
		return createRequest{}, &driver.Error{Op: "create", Namespace: ns, Kind: driver.KindInvalidArgument, Err: err}
	}
	return req, nil
}

func decodeStrict(body io.Reader) (createRequest, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return createRequest{}, fmt.Errorf("request body is larger than %d bytes (%g MiB): %w", tooLarge.Limit, float64(tooLarge.Limit)/(1<<20), err)
		}
		return createRequest{}, &bodyError{err}
	}
	switch v := bytes.TrimLeft(b, " \t\r\n"); {
	case len(v) == 0:
		return createRequest{}, errors.New("request body is empty: want a JSON object")
	case v[0] != '{':
		return createRequest{}, errors.New("request body is not a JSON object")
	}
	// Find the object's end first, so that what follows it is reported as
	// such rather than as a syntax error.
	dec := json.NewDecoder(bytes.NewReader(b))
	var obj json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return createRequest{}, fmt.Errorf("request body: %w", err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return createRequest{}, fmt.Errorf("request body has data after the JSON object, from byte %d", end)
	}
	var req createRequest
	strict, err := kjson.UnmarshalStrict(obj, &req)
	if err != nil {
		return createRequest{}, fmt.Errorf("request body: %w", err)
	}
	if len(strict) > 0 {
		// Every unknown or repeated field, on one line.
		args := make([]any, len(strict))
		for i, e := range strict {
			args[i] = e
		}
		format := "request body: " + strings.TrimSuffix(strings.Repeat("%w; ", len(strict)), "; ")
		return createRequest{}, fmt.Errorf(format, args...)
	}
	return req, nil
}

// bodyError is a request body that could not be read, other than one
// over the limit: the client stopped sending it within -read-timeout, or
// went away. Its message, for the log, names the connection's addresses;
// [publicMessage] leaves them out.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading the request body: " + e.err.Error() }

func (e *bodyError) Unwrap() error { return e.err }

// Timeout reports whether the body did not arrive within -read-timeout.
func (e *bodyError) Timeout() bool { return errors.Is(e.err, os.ErrDeadlineExceeded) }

func (e *bodyError) public() string {
	if e.Timeout() {
		return "the request body did not arrive within the gateway's read timeout"
	}
	return "reading the request body failed"
}

// statusOf maps an error to an HTTP status: 413 for a request body over
// the limit, 408 for one that did not arrive in time, else by the driver
// error's kind.
func statusOf(err error) int {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	var body *bodyError
	if errors.As(err, &body) && body.Timeout() {
		return http.StatusRequestTimeout
	}
	switch kindOf(err) {
	case driver.KindNotFound:
		return http.StatusNotFound
	case driver.KindAlreadyExists, driver.KindConflict:
		return http.StatusConflict
	case driver.KindPrecondition:
		return http.StatusPreconditionFailed
	case driver.KindInvalidArgument:
		return http.StatusBadRequest
	case driver.KindUnavailable:
		return http.StatusServiceUnavailable
	case driver.KindForbidden:
		if refusedByAdmission(err) {
			return http.StatusForbidden
		}
	}
	return http.StatusInternalServerError
}

// kindOf is the driver error's kind as a caller is told it: a sandbox
// another gateway manages is not found, as a missing one is, so that a
// caller does not learn which names exist.
func kindOf(err error) driver.Kind {
	if errors.Is(err, driver.ErrNotOwned) {
		return driver.KindNotFound
	}
	return driver.KindOf(err)
}

// authorizerDenial matches the message of the API server's authorizer
// denying a request, k8s.io/apiserver's responsewriters.forbiddenMessage
// (v0.37.2): `User "<name>" cannot <verb> resource ...` (or `path ...`),
// after `<resource> "<name>" is forbidden: `. Admission's refusals, such as
// ResourceQuota's "exceeded quota: ..." and NamespaceLifecycle's "unable
// to create new content in namespace ... because it is being terminated",
// have the same code and reason (403, Forbidden) and name no user: the
// message is all that tells them apart.
var authorizerDenial = regexp.MustCompile(`User "(?:[^"\\]|\\.)*" cannot `)

// refusedByAdmission reports whether err, of kind forbidden, is the API
// server's admission refusing the request (a quota, a namespace being
// deleted), which its caller can act on, rather than its authorizer
// denying the gateway's own user: that is the gateway's to fix, and its
// message names the user. Anything it cannot tell is the latter.
func refusedByAdmission(err error) bool {
	var status apierrors.APIStatus
	return driver.KindOf(err) == driver.KindForbidden && errors.As(err, &status) &&
		!authorizerDenial.MatchString(status.Status().Message)
}

// reply writes body, if any, as JSON with code; a caller whose answer
// cannot be written gets none either way.
func reply(w http.ResponseWriter, code int, body any) {
	if body == nil {
		w.WriteHeader(code)
		return
	}
	_ = writeAnswer(w, code, body)
}

// fail answers err with its status and {"kind", "error", "id"}: error is
// [publicMessage]'s, id a fresh request ID, also in the X-Request-Id
// header, under which the whole chain is logged. The chain stays in the
// log because a transport error names the API server's URL and the
// addresses of its connection, which are no business of an HTTP caller.
// The log line comes after the answer and says whether it was written:
// one that could not be (its caller went away, the write deadline passed)
// reaches no one, and the line says answered=false with the write's error.
// A write to a connection whose peer has gone usually succeeds into the
// socket's buffer: what fails is a write past its deadline, or to a
// connection already broken.
func fail(w http.ResponseWriter, r *http.Request, log logr.Logger, err error) {
	id := newRequestID(w)
	code := statusOf(err)
	kv := []any{"id", id, "method", r.Method, "path", logPath(r), "status", code}
	if name := userName(r); name != "" {
		kv = append(kv, "user", name)
	}
	if werr := writeAnswer(w, code, map[string]string{"kind": kindOf(err).String(), "error": publicMessage(err), "id": id}); werr != nil {
		kv = append(kv, "answered", false, "writeErr", werr)
	}
	if code >= http.StatusInternalServerError {
		log.Error(err, "request failed", kv...)
	} else {
		log.Info("request refused", append(kv, "err", err)...)
	}
}

// newRequestID returns a fresh request ID, set in w's X-Request-Id header.
func newRequestID(w http.ResponseWriter) string {
	id := rand.Text()
	w.Header().Set("X-Request-Id", id)
	return id
}

// writeAnswer writes body as JSON with code, and flushes it to the connection,
// so that a failed write is known: it returns the write's error.
func writeAnswer(w http.ResponseWriter, code int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	if _, err := w.Write(b); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

// publicMessage is what a caller is told of err: the driver's operation,
// sandbox and kind and, for a kind the caller can act on (a forbidden one
// only if [refusedByAdmission]), the cause, which is then the API server's
// message to its client or the driver's words about the request. Other
// causes (a transport error, an API server's 5xx answer, which may quote
// a proxy's, the authorizer's denial of the gateway's user) are left out.
func publicMessage(err error) string {
	var de *driver.Error
	if !errors.As(err, &de) {
		return "internal error"
	}
	kind := kindOf(err)
	head := (&driver.Error{Op: de.Op, Namespace: de.Namespace, Name: de.Name, Kind: kind}).Error()
	var body *bodyError
	if errors.As(de.Err, &body) {
		return head + ": " + body.public()
	}
	switch {
	case errors.Is(err, driver.ErrNotOwned), apierrors.IsNotFound(err):
		// The same words for both; the API server's would name the resource.
		return head
	case errors.Is(err, driver.ErrNotServed):
		// Not the namespaces it serves.
		return fmt.Sprintf("%s: namespace %s is not served by this gateway", head, quoteValue(de.Namespace))
	}
	switch kind {
	case driver.KindNotFound, driver.KindAlreadyExists, driver.KindConflict, driver.KindPrecondition, driver.KindInvalidArgument:
	case driver.KindForbidden:
		if !refusedByAdmission(err) {
			return head
		}
	default:
		return head
	}
	var status apierrors.APIStatus
	if errors.As(de.Err, &status) {
		return head + ": " + status.Status().Message
	}
	return de.Error()
}
