package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// holdServer is an HTTP/2 server behind a fault proxy. It answers a
// request id's second execution at once and holds its first until the
// connection dies, telling the test on arrived, so that a test knows when
// every request is in flight and can then reset the connection under them.
type holdServer struct {
	proxy   *transporttest.Proxy
	url     string
	base    *http.Transport
	arrived chan string

	mu     sync.Mutex
	counts map[string]int
	conns  map[string]map[string]bool // batch -> server-side remote addresses of held requests
}

func newHoldServer(t *testing.T) *holdServer {
	t.Helper()
	s := &holdServer{arrived: make(chan string, 1024), counts: map[string]int{}, conns: map[string]map[string]bool{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes TestTotalFailure resets
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p, err := transporttest.NewProxy(srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	base, err := transport.New(transport.WithTLSConfig(srv.Client().Transport.(*http.Transport).TLSClientConfig))
	require.NoError(t, err)
	t.Cleanup(base.CloseIdleConnections)
	s.proxy, s.url, s.base = p, "https://"+p.Addr(), base
	return s
}

// serve executes a request; ids are "batch/n". Batch "storm" holds every
// execution.
func (s *holdServer) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.URL.Query().Get("id")
	batch, _, _ := strings.Cut(id, "/")
	s.mu.Lock()
	s.counts[id]++
	n := s.counts[id]
	if n == 1 && batch != "warm" && batch != "storm" {
		if s.conns[batch] == nil {
			s.conns[batch] = map[string]bool{}
		}
		s.conns[batch][r.RemoteAddr] = true
	}
	s.mu.Unlock()
	if batch == "storm" {
		s.arrived <- id
		<-r.Context().Done()
		return
	}
	if n > 1 || batch == "warm" {
		_, _ = io.WriteString(w, "ok")
		return
	}
	s.arrived <- id
	<-r.Context().Done()
}

func (s *holdServer) executed(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[id]
}

func (s *holdServer) connsOf(batch string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns[batch])
}

type result struct {
	id, method string
	err        error
}

// send sends one request and returns its result.
func (s *holdServer) send(rt http.RoundTripper, method, id string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPatch {
		ctx = retry.ContextWithIdempotent(ctx)
		body = strings.NewReader(`{"spec":{"operatingMode":"Suspended"}}`)
	}
	if method == http.MethodPost {
		body = strings.NewReader(`{"metadata":{"name":"sb"}}`)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+"/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes?id="+id, body)
	if err != nil {
		return result{id, method, err}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return result{id, method, err}
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return result{id, method, err}
}

// warm opens a fresh connection and leaves it the only one in the pool.
func (s *holdServer) warm(t *testing.T, rt http.RoundTripper, batch string) {
	t.Helper()
	s.base.CloseIdleConnections()
	require.NoError(t, s.send(rt, http.MethodGet, "warm/"+batch).err)
}

// methodOf is the method of request i of a batch: gets GETs first, then
// patches PATCHes, then POSTs.
func methodOf(i, gets, patches int) string {
	switch {
	case i >= gets+patches:
		return http.MethodPost
	case i >= gets:
		return http.MethodPatch
	}
	return http.MethodGet
}

// batch sends gets GETs, patches marked PATCHes and posts POSTs at once,
// waits until the server holds every one of them, calls lose, and returns
// the results.
func (s *holdServer) batch(t *testing.T, rt http.RoundTripper, name string, gets, patches, posts int, lose func()) []result {
	t.Helper()
	n := gets + patches + posts
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		method := methodOf(i, gets, patches)
		id := fmt.Sprintf("%s/%d", name, i)
		go func() { results <- s.send(rt, method, id) }()
	}
	deadline := time.After(60 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-s.arrived:
		case <-deadline:
			require.FailNow(t, "requests did not arrive", "%d of %d", i, n)
		}
	}
	require.Equal(t, 1, s.connsOf(name), "every request of batch %s is in flight on one connection", name)
	lose()
	out := make([]result, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, <-results)
	}
	return out
}

// check asserts that every GET and marked PATCH succeeded after exactly
// one retry and every POST failed with *retry.Error after one execution.
func (s *holdServer) check(t *testing.T, results []result) {
	t.Helper()
	for _, r := range results {
		if r.method == http.MethodPost {
			var re *retry.Error
			if assert.True(t, errors.As(r.err, &re), "%s %s: %v", r.method, r.id, r.err) {
				assert.Equal(t, 1, re.Attempts, r.id)
				assert.Equal(t, retry.ReasonNotIdempotent, re.Reason, "%s: %v", r.id, r.err)
			}
			assert.Equal(t, 1, s.executed(r.id), "%s %s executed once", r.method, r.id)
			continue
		}
		assert.NoError(t, r.err, "%s %s", r.method, r.id)
		assert.Equal(t, 2, s.executed(r.id), "%s %s executed twice: the lost attempt and one retry", r.method, r.id)
	}
}

// stacks are the two ways the retry middleware learns which connection an
// attempt failed on: a trace of its own, or pooltrace's error when
// pooltrace is below it.
var stacks = []struct {
	name  string
	chain func(retry transport.Middleware) transport.Middleware
}{
	{"own trace", func(mw transport.Middleware) transport.Middleware {
		return transport.Chain(mw, timeout.New(15*time.Second))
	}},
	{"pooltrace below", func(mw transport.Middleware) transport.Middleware {
		return transport.Chain(mw, pooltrace.New(), timeout.New(15*time.Second))
	}},
}

// TestConnectionLoss: one HTTP/2 connection carries every request of a
// client, as client-go's does; it is reset while all of them are in flight.
// The loss is one event: it takes one token from the budget, and every
// idempotent request on the connection is retried once.
func TestConnectionLoss(t *testing.T) {
	tests := []struct {
		name                 string
		gets, patches, posts int
	}{
		{"40 in flight", 20, 10, 10},
		{"200 in flight", 100, 50, 50},
	}
	for _, tt := range tests {
		for _, st := range stacks {
			t.Run(tt.name+"/"+st.name, func(t *testing.T) {
				s := newHoldServer(t)
				log := newRetryLog(t)
				mw, spent := retry.NewCounted(retry.WithLogger(log.logger()))
				rt := st.chain(mw)(s.base)
				s.warm(t, rt, "a")
				results := s.batch(t, rt, "a", tt.gets, tt.patches, tt.posts, func() {
					require.Equal(t, 1, s.proxy.ResetAll())
				})
				s.check(t, results)
				// The loss takes one token. If a retry fails again (once in
				// about twenty -race runs on two busy cores, Go 1.26 closed the
				// fresh connection carrying 100 retries: "unexpected EOF"
				// before the server ran them), that retry pays its own, as
				// the package documentation says.
				later := log.later()
				assert.Equal(t, 1, spent()-later, "tokens taken by the loss; %d by retries of retries", later)
				t.Logf("%d requests in flight, one connection lost: %d token(s), %d more for retries of retries", len(results), spent()-later, later)
			})
		}
	}
}

// TestTwoConnectionLosses: two connections, each carrying 40 requests, are
// reset one second apart, far less than the time the budget's floor would
// take to pay for 60 retries. Each loss costs one token.
func TestTwoConnectionLosses(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) { twoConnectionLosses(t, st.chain) })
	}
}

func twoConnectionLosses(t *testing.T, chain func(transport.Middleware) transport.Middleware) {
	s := newHoldServer(t)
	log := newRetryLog(t)
	mw, spent := retry.NewCounted(retry.WithLogger(log.logger()))
	rt := chain(mw)(s.base)

	s.warm(t, rt, "a")
	var first time.Time
	s.check(t, s.batch(t, rt, "a", 20, 10, 10, func() {
		s.proxy.ResetAll()
		first = time.Now()
	}))
	assert.Equal(t, 1, spent()-log.later(), "the first loss; retries of retries pay their own")

	s.warm(t, rt, "b")
	s.check(t, s.batch(t, rt, "b", 20, 10, 10, func() {
		// The scenario's spacing, not a wait for a condition: the second
		// loss comes at least a second after the first.
		<-time.After(time.Until(first.Add(time.Second)))
		s.proxy.ResetAll()
	}))
	later := log.later()
	assert.Equal(t, 2, spent()-later, "both losses; retries of retries pay their own")
	t.Logf("two connections lost %v apart: %d tokens, %d more for retries of retries", time.Since(first).Round(time.Millisecond), spent()-later, later)
}

// TestTotalFailure: every connection is reset as soon as the client sends
// on it, so no request ever reaches the server. Each retry pays its own
// token, and attempts stay within (1+ratio) times the requests plus the
// floor.
func TestTotalFailure(t *testing.T) {
	s := newHoldServer(t)
	s.proxy.SetFault(transporttest.ResetBeforeForward)
	const (
		ratio   = 0.2
		floor   = 5.0
		n       = 300
		workers = 10
	)
	mw, spent := retry.NewCounted(retry.WithBackoff(noWait), retry.WithBudget(ratio, floor))
	var attempts atomic.Int64
	count := func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			attempts.Add(1)
			return next.RoundTrip(r)
		})
	}
	rt := transport.Chain(mw, count)(s.base)
	start := time.Now()
	var wg sync.WaitGroup
	var budgetStops atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/workers; i++ {
				r := s.send(rt, http.MethodGet, fmt.Sprintf("t/%d-%d", w, i))
				var re *retry.Error
				if assert.True(t, errors.As(r.err, &re), "%v", r.err) && re.Reason == retry.ReasonBudget {
					budgetStops.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	limit := (1+ratio)*n + floor*(1+elapsed) + 1
	t.Logf("%d requests, %d attempts, %d tokens in %.2fs, limit %.1f, %d stopped by the budget", n, attempts.Load(), spent(), elapsed, limit, budgetStops.Load())
	assert.LessOrEqual(t, float64(attempts.Load()), limit)
	assert.Equal(t, int(attempts.Load())-n, spent(), "every retry paid a token")
	assert.Greater(t, budgetStops.Load(), int64(n/2), "the budget stopped most retries")
}

// TestNoLoadIsFree: a dial that never connected costs no token; retrying
// it adds no load to any server. With an empty budget it is still retried
// until the attempts run out, while a lost connection is not retried.
func TestNoLoadIsFree(t *testing.T) {
	mw, spent := retry.NewCounted(retry.WithBackoff(noWait), retry.WithBudget(0, 0))
	base, err := transport.New()
	require.NoError(t, err)
	defer base.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("{}"))
	require.NoError(t, err)
	_, err = mw(base).RoundTrip(req)
	var re *retry.Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, retry.ReasonAttempts, re.Reason)
	assert.Equal(t, retry.DefaultMaxAttempts, re.Attempts)
	assert.Equal(t, 0, spent())

	s := newHoldServer(t)
	s.proxy.SetFault(transporttest.ResetBeforeForward)
	r := s.send(mw(s.base), http.MethodGet, "x/0")
	require.True(t, errors.As(r.err, &re), "%v", r.err)
	assert.Equal(t, retry.ReasonBudget, re.Reason, "%v", r.err)
	assert.Equal(t, 1, re.Attempts)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDialCost: a dial that never connected is free; one that connected
// and was reset cost the server an accept and pays a token.
func TestDialCost(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}}
	}
	tests := []struct {
		name string
		give error
		want string
	}{
		{"refused", dial(syscall.ECONNREFUSED), "none"},
		{"host unreachable", dial(syscall.EHOSTUNREACH), "none"},
		{"network unreachable", dial(syscall.ENETUNREACH), "none"},
		{"SYN unanswered", dial(syscall.ETIMEDOUT), "none"},
		{"accepted, then reset", dial(syscall.ECONNRESET), "request"},
		{"temporary DNS failure", &net.DNSError{Err: "server misbehaving", Name: "api", IsTemporary: true}, "none"},
		{"reset on an open connection", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "connection"},
		{"unexpected EOF", io.ErrUnexpectedEOF, "connection"},
		{"http2 connection not established", errors.New("http2: client conn could not be established"), "request"},
		{"http2 connection force closed", errors.New("http2: client connection force closed via ClientConn.Close"), "connection"},
		{"http2 connection closed under a body", errors.New("http2: client conn is closed"), "connection"},
		{"attempt deadline", fmt.Errorf("attempt: %w", context.DeadlineExceeded), "request"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, retry.BudgetCause(tt.give), tt.name)
	}
}

// TestStormInFlight: the worst case for shared tokens, a server that takes
// requests on every connection and then drops the connection under them.
// Each round the test waits until every request still running is held at
// the server, then resets every connection. Every request shares a token
// once and pays for any further retry, so attempts stay within
// (2+ratio)*N plus the floor.
func TestStormInFlight(t *testing.T) {
	s := newHoldServer(t)
	const (
		ratio         = 0.2
		floor         = 10.0
		gets, patches = 100, 50
		posts         = 50
		n             = gets + patches + posts
	)
	mw, spent := retry.NewCounted(retry.WithBudget(ratio, floor))
	var attempts atomic.Int64
	count := func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			attempts.Add(1)
			return next.RoundTrip(r)
		})
	}
	rt := transport.Chain(mw, count, timeout.New(15*time.Second))(s.base)
	s.warm(t, rt, "a")
	start := time.Now()
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		method := methodOf(i, gets, patches)
		id := fmt.Sprintf("storm/%d", i)
		go func() { results <- s.send(rt, method, id) }()
	}
	// Every request still running either comes back to the server or
	// ends, once per round.
	deadline := time.After(60 * time.Second)
	reasons := map[retry.Reason]int{}
	for running, round := n, 1; running > 0; round++ {
		ended := 0
		for i := 0; i < running; i++ {
			select {
			case <-s.arrived:
			case r := <-results:
				ended++
				var re *retry.Error
				if assert.True(t, errors.As(r.err, &re), "%s %s: %v", r.method, r.id, r.err) {
					// A lost connection fails its streams with several
					// errors (reset, broken pipe, force closed, not
					// established); the classifier must know each one.
					assert.NotEqual(t, retry.ReasonNotRetryable, re.Reason, "%s %s: %v", r.method, r.id, r.err)
					reasons[re.Reason]++
				}
			case <-deadline:
				require.FailNow(t, "requests did not arrive", "round %d", round)
			}
		}
		running -= ended
		if running > 0 {
			s.proxy.ResetAll()
		}
	}
	elapsed := time.Since(start).Seconds()
	limit := (2+ratio)*n + floor*(1+elapsed) + 1
	t.Logf("%d requests, %d attempts, %d tokens in %.2fs, limit %.1f; ended: %v", n, attempts.Load(), spent(), elapsed, limit, reasons)
	assert.LessOrEqual(t, float64(attempts.Load()), limit)
	assert.Equal(t, posts, reasons[retry.ReasonNotIdempotent], "every POST stopped after its first attempt")
}

var waitField = regexp.MustCompile(`"wait"="[^"]*" ?`)

// retryLog collects the middleware's retry lines and prints how many
// retries each attempt number and error made, if the test fails.
type retryLog struct {
	mu    sync.Mutex
	lines map[string]int
}

func newRetryLog(t *testing.T) *retryLog {
	l := &retryLog{lines: map[string]int{}}
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			for line, n := range l.lines {
				t.Logf("%d retries: %s", n, line)
			}
		}
	})
	return l
}

// later reports how many retries followed a retry.
func (l *retryLog) later() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line, c := range l.lines {
		if !strings.HasPrefix(line, `"attempt"=1 `) {
			n += c
		}
	}
	return n
}

func (l *retryLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		// Keep the attempt, class and error; drop the path and wait.
		if i := strings.Index(args, `"attempt"`); i >= 0 {
			args = args[i:]
		}
		args = waitField.ReplaceAllString(args, "")
		l.mu.Lock()
		l.lines[args]++
		l.mu.Unlock()
	}, funcr.Options{})
}
