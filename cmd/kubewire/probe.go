package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/cmd/kubewire/internal/redact"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
)

// row is one measured request.
type row struct {
	Client     string  `json:"client"`
	Gap        string  `json:"gap"`
	GapSeconds float64 `json:"gapSeconds"`
	Reused     bool    `json:"reused"`
	Idle       string  `json:"idle"`
	Latency    string  `json:"latency"`
	// TimeLeft is what kubewire's timeout had left; empty when the client
	// has no deadline.
	TimeLeft string `json:"timeLeft,omitempty"`
	// Outcome is "ok", "re-sent" (net/http re-sent it after a failure on a
	// reused connection) or "error".
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`

	idle time.Duration
}

type report struct {
	Mode    string `json:"mode"`
	Server  string `json:"server"`
	Timeout string `json:"timeout"`
	Rows    []row  `json:"rows"`
	Summary string `json:"summary"`
}

// maxDuration bounds -timeout and each of -gaps. A day is longer than any
// idle limit worth probing; and it keeps the probe's arithmetic in range:
// kubewire's list may take [retryRoom] of -timeout, about three times it,
// and a time.Duration holds about 292 years.
const maxDuration = 24 * time.Hour

type gapsFlag []time.Duration

func (g *gapsFlag) String() string {
	s := make([]string, len(*g))
	for i, d := range *g {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func (g *gapsFlag) Set(v string) error {
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return fmt.Errorf("gap %q is not a non-negative duration", f)
		}
		if d > maxDuration {
			return fmt.Errorf("gap %q is longer than the %v maximum", f, maxDuration)
		}
		out = append(out, d)
	}
	*g = out
	return nil
}

func probe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubewire probe", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: kubewire probe [flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of a cluster to probe (default: $KUBECONFIG, which may list files to merge as kubectl does; with neither, a built-in local server)")
	kcontext := fs.String("context", "", "kubeconfig context")
	timeout := fs.Duration("timeout", 2*time.Second, "kubewire's per-request timeout, and the longest either client may wait for one answer (at most 24h)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	latency := fs.Duration("latency", 300*time.Millisecond, "local server only: how long it takes to answer")
	lbIdle := fs.Duration("lb-idle", time.Second, "local server only: a load balancer in front of it drops flows idle longer than this")
	gaps := gapsFlag{}
	fs.Var(&gaps, "gaps", "comma-separated idle gaps, each at most 24h (default 0s,500ms,900ms,1.5s,2.5s locally; 0s,5s,15s,30s,60s,90s against a cluster)")
	// Help asked for goes to stdout and succeeds, as `kubewire -h` does; a
	// mistake goes to stderr. The flag package would print both to one
	// writer.
	fs.SetOutput(io.Discard)
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kubewire probe: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "kubewire probe: -timeout must be positive, got %v\n", *timeout)
		return 2
	}
	if *timeout > maxDuration {
		fmt.Fprintf(stderr, "kubewire probe: -timeout %v is longer than the %v maximum\n", *timeout, maxDuration)
		return 2
	}
	// -kubeconfig names one file, as kubectl's does; $KUBECONFIG may list
	// several, merged as kubectl merges them.
	var rules *clientcmd.ClientConfigLoadingRules
	var missing error
	if *kubeconfig != "" {
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: *kubeconfig}
	} else if *kubeconfig = os.Getenv(clientcmd.RecommendedConfigPathEnvVar); *kubeconfig != "" {
		rules = clientcmd.NewDefaultClientConfigLoadingRules()
		// Migration copies an old ~/.kube/.kubeconfig to ~/.kube/config: a
		// probe writes nothing.
		rules.MigrationRules = nil
		// Files that are missing are skipped; when all are, client-go only
		// logs their names, and the error would say no more than that the
		// configuration is empty.
		rules.Warner = func(err error) { missing = err }
	}

	rep := report{Timeout: timeout.String()}
	var cfg *rest.Config
	if *kubeconfig == "" {
		if *latency < 0 || *lbIdle <= 0 {
			fmt.Fprintf(stderr, "kubewire probe: -latency must not be negative and -lb-idle must be positive\n")
			return 2
		}
		srv, err := newLocalServer(*latency, *lbIdle)
		if err != nil {
			fmt.Fprintf(stderr, "kubewire probe: %v\n", err)
			return 1
		}
		defer srv.Close()
		cfg = &rest.Config{Host: srv.URL}
		rep.Mode = fmt.Sprintf("local server answering in %v behind a load balancer that drops flows idle over %v", *latency, *lbIdle)
		if len(gaps) == 0 {
			gaps = gapsFlag{0, 500 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond}
		}
	} else {
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kcontext}).ClientConfig()
		if missing != nil && clientcmd.IsEmptyConfig(err) {
			err = missing
		}
		if err != nil {
			fmt.Fprintf(stderr, "kubewire probe: loading kubeconfig %s: %v\n", *kubeconfig, message(err))
			return 1
		}
		cfg = c
		rep.Mode = "cluster from " + *kubeconfig
		if len(gaps) == 0 {
			gaps = gapsFlag{0, 5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second, 90 * time.Second}
		}
	}
	// The password of the server URL, masked in everything printed from
	// here on, wherever an error quotes it: client-go quotes a host that
	// does not parse, password and all.
	stdout = redact.Writer{W: stdout, Host: cfg.Host}
	stderr = redact.Writer{W: stderr, Host: cfg.Host}
	rep.Server = redact.String(cfg.Host)

	bare, err := newProber("client-go", cfg, 0)
	if err == nil {
		var kw *prober
		kw, err = newProber("kubewire", cfg, *timeout)
		if err == nil {
			err = sweep(ctx, &rep, []*prober{bare, kw}, gaps, *timeout, stderr)
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "kubewire probe: interrupted")
		return exitInterrupted
	}
	if err != nil {
		printErrors(stderr, err)
		return 1
	}
	rep.Summary = summarize(rep.Rows)
	// The report is written whole, in one write whose error says whether
	// it arrived: on a full disk or a closed pipe the probe must fail.
	var b bytes.Buffer
	if *asJSON {
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "kubewire probe: encoding the report: %s\n", message(err))
			return 1
		}
	} else {
		printReport(&b, rep)
	}
	if _, err := stdout.Write(b.Bytes()); err != nil {
		fmt.Fprintf(stderr, "kubewire probe: writing the report: %s\n", message(err))
		return 1
	}
	return 0
}

// exitInterrupted is the status of a probe stopped by SIGINT: 128 + 2, as
// shells report a process that SIGINT killed.
const exitInterrupted = 130

// printErrors prints err on a line of its own, or each error it joins on a
// line of its own: the two probers fail side by side, and their errors on
// one line run together.
func printErrors(w io.Writer, err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, err := range errs {
		fmt.Fprintf(w, "kubewire probe: %s\n", message(err))
	}
}

// message is the text of err as the probe prints it: on one line, with the
// password of any URL in it masked.
func message(err error) string {
	return redact.Text(strings.Join(strings.Fields(err.Error()), " "))
}

// newLocalServer imitates an API server behind a load balancer: answers
// after latency, on a listener that resets flows idle longer than lbIdle.
func newLocalServer(latency, lbIdle time.Duration) (*localServer, error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/version":
			_, _ = io.WriteString(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2-kubewire-probe"}`)
		case "/api/v1/namespaces":
			_, _ = io.WriteString(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"default"}}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = idleDropListener{Listener: srv.Listener, idle: lbIdle}
	srv.Start()
	return &localServer{URL: srv.URL, srv: srv}, nil
}

type localServer struct {
	URL string
	srv *httptest.Server
}

func (s *localServer) Close() { s.srv.Close() }

// prober is one client under test, with its own connection pool.
type prober struct {
	name    string
	cs      kubernetes.Interface
	timeout time.Duration

	// stack is set for the client through kubewire's stack.
	stack bool
	// plugin is the command of the kubeconfig's exec credential plugin,
	// if it has one.
	plugin string

	mu       sync.Mutex
	attempts []pooltrace.Attempt
}

// newProber builds a client from cfg: stock client-go when timeout is
// zero, kubewire with that timeout otherwise.
func newProber(name string, cfg *rest.Config, timeout time.Duration) (*prober, error) {
	p := &prober{name: name}
	if cfg.ExecProvider != nil {
		p.plugin = cfg.ExecProvider.Command
	}
	c := rest.CopyConfig(cfg)
	// A dialer of its own keeps client-go from sharing one cached
	// transport, and so one pool, between the two clients.
	c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	observe := func(a pooltrace.Attempt) {
		p.mu.Lock()
		p.attempts = append(p.attempts, a)
		p.mu.Unlock()
	}
	if timeout == 0 {
		// pooltrace only observes: the stock client keeps its transport.
		// Its waits are bounded through the context (see measure).
		c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return pooltrace.New(pooltrace.WithObserver(observe))(rt)
		})
		p.timeout = c.Timeout
	} else {
		if err := kubeadapter.Apply(c, kubeadapter.WithTimeout(timeout), kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: observe})); err != nil {
			return nil, err
		}
		p.timeout, p.stack = timeout, true
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	p.cs = cs
	return p, nil
}

// measure warms the pool with GET /version, waits gap, lists namespaces
// and reports what happened to that list. The warm-up may take at most
// limit, as may stock client-go's list; kubewire's list may take its whole
// retry loop ([retryRoom]), since a stalled attempt retried on a new
// connection is what the probe is there to show; a request that outlives
// its time, [abandonAfter] more ([prober.within]).
func (p *prober) measure(ctx context.Context, gap, limit time.Duration) (row, error) {
	r := row{Client: p.name, Gap: gap.String(), GapSeconds: gap.Seconds()}
	timeout := fmt.Sprintf("the %v -timeout", limit)
	err := p.within(ctx, limit, timeout, func(ctx context.Context) error {
		// Error, unlike the Raw of ServerVersion, keeps the message of a
		// Status the server answers with, such as who it forbids.
		return p.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
	})
	if err != nil {
		return r, warmUpError(p.name, err)
	}
	select {
	case <-time.After(gap):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	p.mu.Lock()
	p.attempts = nil
	p.mu.Unlock()
	listLimit, listTimeout := limit, timeout
	if p.stack {
		listLimit = retryRoom(p.timeout)
		listTimeout = fmt.Sprintf("%v, kubewire's %d attempts of the %v -timeout", listLimit, retry.DefaultMaxAttempts, limit)
	}
	start := time.Now()
	err = p.within(ctx, listLimit, listTimeout, func(ctx context.Context) error {
		_, err := p.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.Latency = elapsed.Round(time.Millisecond).String()
	if p.timeout > 0 {
		r.TimeLeft = (p.timeout - elapsed).Round(time.Millisecond).String()
	}
	p.mu.Lock()
	attempts := p.attempts
	p.mu.Unlock()
	if len(attempts) > 0 {
		first := attempts[0]
		conn := first.Conn
		if len(first.Earlier) > 0 {
			conn = first.Earlier[0]
		}
		r.Reused, r.idle = conn.Reused, conn.IdleTime
		r.Idle = conn.IdleTime.Round(time.Millisecond).String()
	}
	switch {
	case err != nil:
		r.Outcome, r.Error = "error", message(err)
	case len(attempts) > 1 || (len(attempts) == 1 && len(attempts[0].Earlier) > 0):
		r.Outcome = "re-sent"
	default:
		r.Outcome = "ok"
	}
	return r, nil
}

// warmUpError says what stopped client's warm-up, err: an answer that
// refused it, or no answer.
func warmUpError(client string, err error) error {
	var abandoned *abandonedError
	switch {
	case errors.As(err, &abandoned) && abandoned.Plugin != "":
		return fmt.Errorf("%s got no credentials: %w", client, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server answered %s with 401 Unauthorized, refusing its credentials: %w", client, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server answered %s with 403 Forbidden, refusing the request: %w", client, err)
	}
	return fmt.Errorf("%s cannot reach the API server: %w", client, err)
}

// within runs req with a context that ends after limit, which what names
// in the error. The probe is a diagnostic for clusters that may not answer
// at all: it must end whatever the server does, and stock client-go has no
// deadline of its own. The deadline travels in the context, so the
// clients' transports, which are what the probe measures, stay as they
// are.
//
// A request that outlives its context is abandoned: [abandonAfter] once
// limit has passed, and at once when ctx ends, so that the first Ctrl-C
// ends the probe. client-go's transports end a request with its context;
// what does not is a kubeconfig's exec credential plugin, which client-go
// runs, before the transport, without a deadline.
func (p *prober) within(ctx context.Context, limit time.Duration, what string, req func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var sent atomic.Bool
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{GetConn: func(string) { sent.Store(true) }})
	done := make(chan error, 1)
	go func() { done <- req(rctx) }()
	var err error
	select {
	case err = <-done:
	case <-rctx.Done():
		select {
		case err = <-done:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(abandonAfter):
			e := &abandonedError{What: what}
			if !sent.Load() {
				e.Plugin = p.plugin
			}
			return e
		}
	}
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s: %w", what, err)
	}
	return err
}

// abandonAfter is how long [prober.within] waits, once a request's time
// is up, for it to end: client-go ends one at once, with an error that
// says more than the probe's.
const abandonAfter = time.Second

// abandonedError is a request that did not end when its time was up, and
// that the probe stopped waiting for. It is still running.
type abandonedError struct {
	// What names the time the request had, as "the 2s -timeout".
	What string
	// Plugin is the command of the exec credential plugin the request was
	// waiting for: set when the request never reached the transport and
	// the kubeconfig has one.
	Plugin string
}

func (e *abandonedError) Error() string {
	if e.Plugin != "" {
		return fmt.Sprintf("the exec credential plugin %s has not answered within %s; client-go gives it no deadline, and it is still running", e.Plugin, e.What)
	}
	return fmt.Sprintf("no answer within %s, and the request did not end with its context; it is still running", e.What)
}

func (e *abandonedError) Unwrap() error { return context.DeadlineExceeded }

func (e *abandonedError) Timeout() bool { return true }

// retryRoom is the longest the kubewire stack's retry loop can take with
// the default retry options and a per-attempt timeout: every attempt's
// timeout, the longest backoff before each retry, and retrySlack.
func retryRoom(timeout time.Duration) time.Duration {
	d := time.Duration(retry.DefaultMaxAttempts)*timeout + retrySlack
	for n := 1; n < retry.DefaultMaxAttempts; n++ {
		d += min(retry.DefaultBackoffMax, retry.DefaultBackoffBase<<(n-1))
	}
	return d
}

// retrySlack is room for the time between the retry loop's attempts
// beyond its backoffs: on a loaded machine the attempts start late, and
// without it the last one ran into the probe's bound (reason deadline)
// before its own timeout (attempts exhausted), which is what the probe
// reports on.
const retrySlack = time.Second

func sweep(ctx context.Context, rep *report, probers []*prober, gaps []time.Duration, limit time.Duration, progress io.Writer) error {
	for i, gap := range gaps {
		fmt.Fprintf(progress, "\rprobing: idle gap %v (%d of %d)...   ", gap, i+1, len(gaps))
		rows := make([]row, len(probers))
		errs := make([]error, len(probers))
		var wg sync.WaitGroup
		for j, p := range probers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rows[j], errs[j] = p.measure(ctx, gap, limit)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			fmt.Fprintln(progress)
			return ctx.Err()
		}
		if err := errors.Join(errs...); err != nil {
			fmt.Fprintln(progress)
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	fmt.Fprintln(progress)
	return nil
}

// summarize explains the table in one paragraph.
func summarize(rows []row) string {
	var firstBad, lastGood time.Duration = -1, -1
	for _, r := range rows {
		if !r.Reused {
			continue
		}
		if r.Outcome == "ok" {
			lastGood = max(lastGood, r.idle)
		} else if firstBad < 0 || r.idle < firstBad {
			firstBad = r.idle
		}
	}
	switch {
	case firstBad >= 0 && lastGood >= 0:
		return fmt.Sprintf("Pooled connections idle for %v or more failed when reused, while those idle for %v were fine: something between this client and the API server (a load balancer, a NAT or a firewall) drops idle connections after between %v and %v. net/http re-sent these GETs on a new connection, so reads survived, possibly executed twice; a PATCH, POST or DELETE on such a connection fails. Keep the clients' idle-connection timeout at or below %v: kubeadapter.Apply(cfg, kubeadapter.WithIdleConnTimeout(%v)) for a client-go config (client-go keeps idle connections 90s); kubeadapter re-sends a write whose precondition (metadata.resourceVersion, a delete's uid) makes a second copy harmless, so give writes one.",
			firstBad.Round(time.Millisecond), lastGood.Round(time.Millisecond), lastGood.Round(time.Millisecond), firstBad.Round(time.Millisecond), lastGood.Round(time.Millisecond), safeIdle(lastGood, firstBad))
	case firstBad >= 0:
		return fmt.Sprintf("Every reused pooled connection failed, the shortest idle for %v: connections do not survive being idle here. Keep the clients' idle-connection timeout below that: kubeadapter.Apply(cfg, kubeadapter.WithIdleConnTimeout(%v)) for a client-go config; kubeadapter re-sends a write whose precondition (metadata.resourceVersion, a delete's uid) makes a second copy harmless, so give writes one.", firstBad.Round(time.Millisecond), safeIdle(0, firstBad))
	case lastGood >= 0:
		return fmt.Sprintf("Pooled connections idle for up to %v were reused without failure. Nothing here drops idle connections within the gaps probed; probe longer gaps (-gaps) to find the limit of your load balancer. The time-left column is the time each kubewire request had to spare.", lastGood.Round(time.Millisecond))
	}
	return "No connection was reused, so nothing can be said about idle limits; probe longer gaps (-gaps)."
}

// safeIdle is the idle-connection timeout to advise: the longest idle time
// that survived, or half the shortest that failed when none survived: in
// whole seconds, rounded down, when it is that long, else in milliseconds
// as the summary prints it.
func safeIdle(lastGood, firstBad time.Duration) time.Duration {
	d := lastGood
	if d <= 0 {
		d = firstBad / 2
	}
	if d >= time.Second {
		return d.Truncate(time.Second)
	}
	return max(d.Round(time.Millisecond), time.Millisecond)
}

func printReport(w io.Writer, rep report) {
	fmt.Fprintf(w, "probe of %s (%s), kubewire timeout %s\n\n", rep.Server, rep.Mode, rep.Timeout)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gap\tclient\treused\tidle\tlatency\ttime left\toutcome\t")
	for _, r := range rep.Rows {
		reused, idle, left := "no", "-", r.TimeLeft
		if r.Reused {
			reused, idle = "yes", r.Idle
		}
		if left == "" {
			left = "no deadline"
		}
		outcome := r.Outcome
		if r.Error != "" {
			outcome += ": " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Gap, r.Client, reused, idle, r.Latency, left, outcome)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", rep.Summary)
}
