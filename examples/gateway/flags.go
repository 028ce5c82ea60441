package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kubewire/kubewire/kubeadapter"
)

// config is the gateway's flags, parsed and checked.
type config struct {
	kubeconfig     string
	listen         string
	gateway        string
	namespaces     []string // sorted, without repeats
	period         time.Duration
	replicas       int
	leaseNS        string
	leaseName      string
	once           bool
	grace          time.Duration
	readTimeout    time.Duration
	requestTimeout time.Duration
	writeTimeout   time.Duration
	idleTimeout    time.Duration
	authenticate   bool
	tlsCert        string
	tlsKey         string
	audiences      string
	insecureListen bool
	auditRequestID bool
	apiTimeout     time.Duration
	pingAfter      time.Duration // 0: client-go's HTTP/2 health check
	pingTimeout    time.Duration
}

// parseFlags parses args as the gateway's flags and checks them. When they
// do not parse or do not go together it says why on stderr (the flag
// package says it for the former) and returns false: run exits 2.
func parseFlags(args []string, stderr io.Writer) (config, bool) {
	var c config
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to serve the API on")
	fs.StringVar(&c.gateway, "gateway", "gateway", "this gateway's name, a label value")
	namespaces := fs.String("namespace", "default", "comma-separated namespaces the gateway manages")
	fs.DurationVar(&c.period, "period", 10*time.Minute, "resync period of the reconciler (jittered); events drive it")
	fs.IntVar(&c.replicas, "replicas", 1, "how many replicas of this gateway run; above 1, they elect a leader")
	fs.StringVar(&c.leaseNS, "lease-namespace", "", "namespace of the leader election Lease (default: the first -namespace in sorted order)")
	fs.StringVar(&c.leaseName, "lease-name", "", "name of the leader election Lease (default: <gateway>-reconciler)")
	fs.BoolVar(&c.once, "once", false, "run one reconcile pass and exit")
	fs.DurationVar(&c.grace, "shutdown-grace", defaultShutdownGrace, "on SIGTERM or SIGINT, how long requests in flight have to be answered before they are cut off")
	fs.DurationVar(&c.readTimeout, "read-timeout", defaultReadTimeout, "how long a client has to send a whole request, headers and body")
	fs.DurationVar(&c.requestTimeout, "request-timeout", defaultRequestTimeout, "how long the gateway works on a request, its API server calls included, before it answers 503; less than -write-timeout")
	fs.DurationVar(&c.writeTimeout, "write-timeout", defaultWriteTimeout, "how long the gateway has, from the end of a request's headers, to write the whole answer")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a keep-alive connection may wait for its next request; above the idle timeout of a load balancer in front")
	fs.BoolVar(&c.authenticate, "authenticate", true, "let in only callers whose bearer token the API server accepts (TokenReview) and whom RBAC allows the route's verb on sandboxes."+apiGroup+" in its namespace (SubjectAccessReview); off, whoever reaches the gateway acts with its rights")
	fs.StringVar(&c.tlsCert, "tls-cert-file", "", "serve HTTPS with this certificate (PEM), reloaded when the file changes; with -tls-key-file")
	fs.StringVar(&c.tlsKey, "tls-key-file", "", "the private key (PEM) of -tls-cert-file")
	fs.StringVar(&c.audiences, "token-audiences", "", "comma-separated audiences a caller's token must be issued for (kubectl create token --audience); default: the API server's, so that a caller's token also works against the API server")
	fs.BoolVar(&c.insecureListen, "insecure-listen", false, "serve a -listen address other than loopback without TLS or without -authenticate: whoever on the network reaches it reads the traffic, or acts with the gateway's rights")
	fs.BoolVar(&c.auditRequestID, "audit-request-id", false, "send each call's request ID (the caller's X-Request-Id, if valid) as the Audit-ID of the API server requests it makes: a caller then chooses the ID its calls are audited under; on only where callers are trusted")
	fs.DurationVar(&c.apiTimeout, "api-timeout", kubeadapter.DefaultTimeout, "how long each attempt of an API server call may take before it is cut off and, if safe, retried")
	fs.DurationVar(&c.pingAfter, "api-ping-after", 0, "with -api-ping-timeout: ping an HTTP/2 connection to the API server after this long without frames, and close it if the ping is unanswered within -api-ping-timeout, so a dead connection is found in their sum (default: client-go's, 30s and 15s)")
	fs.DurationVar(&c.pingTimeout, "api-ping-timeout", 0, "see -api-ping-after")
	if err := fs.Parse(args); err != nil {
		return c, false
	}
	// Sorted, as the driver keeps them, so that replicas given the same
	// namespaces in another order agree on the Lease's.
	c.namespaces = slices.Compact(slices.Sorted(slices.Values(strings.Split(*namespaces, ","))))
	return c, c.check(stderr)
}

// check reports whether c's flags go together; if not, it says why on
// stderr.
func (c config) check(stderr io.Writer) bool {
	if (c.tlsCert == "") != (c.tlsKey == "") {
		fmt.Fprintf(stderr, "gateway: -tls-cert-file %q and -tls-key-file %q go together\n", c.tlsCert, c.tlsKey)
		return false
	}
	if loopback, err := isLoopback(c.listen); err != nil {
		fmt.Fprintf(stderr, "gateway: -listen %q: %v\n", c.listen, err)
		return false
	} else if !loopback && (c.tlsCert == "" || !c.authenticate) && !c.insecureListen {
		fmt.Fprintf(stderr, "gateway: -listen %s is not a loopback address: serve it with -tls-cert-file, -tls-key-file and -authenticate, or say -insecure-listen to let whoever reaches it read the traffic or act with the gateway's rights\n", c.listen)
		return false
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"shutdown-grace", c.grace}, {"read-timeout", c.readTimeout}, {"request-timeout", c.requestTimeout}, {"write-timeout", c.writeTimeout}, {"idle-timeout", c.idleTimeout}, {"api-timeout", c.apiTimeout}} {
		if f.d <= 0 {
			fmt.Fprintf(stderr, "gateway: -%s must be positive, got %v\n", f.name, f.d)
			return false
		}
	}
	if c.pingAfter < 0 || c.pingTimeout < 0 || (c.pingAfter == 0) != (c.pingTimeout == 0) {
		fmt.Fprintf(stderr, "gateway: -api-ping-after %v and -api-ping-timeout %v go together, both positive\n", c.pingAfter, c.pingTimeout)
		return false
	}
	if c.readTimeout >= c.writeTimeout {
		// A body that stops coming is answered 408 when -read-timeout,
		// counted from the request's first byte, runs out; -write-timeout,
		// counted from the end of its headers, must not have run out by
		// then, or the 408 cannot be written: its caller sees the
		// connection closed.
		fmt.Fprintf(stderr, "gateway: -read-timeout %v must be less than -write-timeout %v\n", c.readTimeout, c.writeTimeout)
		return false
	}
	if c.requestTimeout >= c.writeTimeout {
		// Else a request that runs out of time has no time left to be
		// answered: its caller sees the connection cut, not a 503.
		fmt.Fprintf(stderr, "gateway: -request-timeout %v must be less than -write-timeout %v\n", c.requestTimeout, c.writeTimeout)
		return false
	}
	return true
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
