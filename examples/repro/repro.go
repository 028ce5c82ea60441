package main

// The scenario: a read deadline that lives on a pooled connection counts
// the time the connection sat idle. The server, the two clients, one
// probe and the sweep the table shows.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// Server is a loopback HTTP server that answers every request after a fixed
// latency and counts how many times it executed each request, by the id
// query parameter.
type Server struct {
	srv     *httptest.Server
	latency time.Duration

	mu     sync.Mutex
	counts map[string]int
}

// NewServer starts a server answering after latency, over HTTP/1.1 in the
// clear, or over HTTP/2 with TLS when http2 is true.
func NewServer(latency time.Duration, http2 bool) *Server {
	s := &Server{latency: latency, counts: map[string]int{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if http2 {
		s.srv.EnableHTTP2 = true
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.counts[r.URL.Query().Get("id")]++
	s.mu.Unlock()
	select {
	case <-time.After(s.latency):
	case <-r.Context().Done():
		// The client gave up; the request was executed all the same.
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"Status","status":"Success"}`)
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Close shuts the server down.
func (s *Server) Close() { s.srv.Close() }

// Executions reports how many times the server executed request id.
func (s *Server) Executions(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[id]
}

// TLSConfig returns a client TLS config that trusts the server, or nil for a
// server in the clear.
func (s *Server) TLSConfig() *tls.Config {
	if s.srv.TLS == nil {
		return nil
	}
	return s.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

// NaiveClient returns client A: kubewire's pooled base transport with a
// connection-level read timeout of d and no per-request deadline. It is
// traced by pooltrace, which only observes, so that its errors name the
// connection they died on.
func NaiveClient(s *Server, d time.Duration, log logr.Logger) (http.RoundTripper, error) {
	base, err := transport.New(transport.WithTLSConfig(s.TLSConfig()))
	if err != nil {
		return nil, err
	}
	base.DialContext = NaiveDialer(d, base.DialContext)
	return pooltrace.New(pooltrace.WithLogger(log))(base), nil
}

// KubewireClient returns client B: the same pooled base transport, with no
// deadline on the connection, under the kubewire stack with a per-request
// timeout of d.
func KubewireClient(s *Server, d time.Duration, log logr.Logger) (http.RoundTripper, error) {
	base, err := transport.New(transport.WithTLSConfig(s.TLSConfig()))
	if err != nil {
		return nil, err
	}
	return transport.Chain(
		pooltrace.New(pooltrace.WithLogger(log)),
		timeout.New(d),
	)(base), nil
}

// Result is the outcome of one request of the sweep.
type Result struct {
	Client string
	Method string
	Gap    time.Duration
	// Status is the HTTP status, zero on error.
	Status  int
	Err     error
	Elapsed time.Duration
	// Executions is how many times the server executed the request.
	Executions int
	// Reused and Idle describe the connection the request was first sent
	// on: whether it was the pooled one and how long it had sat idle. On a
	// loaded machine the pooled connection of client A can die of its own
	// read timeout before the request goes out, and the request then goes
	// out on a new one.
	Reused bool
	Idle   time.Duration
	// Left is, for client A when HasLeft, how long the connection's read
	// deadline had left when the request was written: what a request
	// really had, where Idle, measured by net/http, misses the time the
	// connection's pending Read began late on a loaded machine.
	Left    time.Duration
	HasLeft bool
	// Answered is, for client A, how long client B's request of the same
	// method and gap took: what an answer really took at that moment, on
	// a loaded machine longer than the server's latency. Zero when not
	// known.
	Answered time.Duration
}

// Outcome is a short description for a table cell.
func (r Result) Outcome() string {
	if r.Err != nil {
		return fmt.Sprintf("FAIL %v", r.Elapsed.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("ok %v", r.Elapsed.Round(10*time.Millisecond))
}

// warmUps is how many times Probe tries its warm-up GET.
const warmUps = 3

// Probe sends a warm-up GET on rt, so that a connection goes back to the
// pool, waits gap, then sends method on the same pool and reports what
// happened to it. The warm-up only fills the pool, and is not measured:
// on a loaded machine its TLS handshake can outlast client A's read
// timeout, so a failed one is tried again, up to warmUps times.
func Probe(ctx context.Context, s *Server, rt http.RoundTripper, method string, gap time.Duration, id string) Result {
	r := Result{Method: method, Gap: gap}
	var err error
	tries := 1
	for ; ; tries++ {
		_, err = send(ctx, s, rt, http.MethodGet, fmt.Sprintf("%s-warm%d", id, tries))
		if err == nil || tries == warmUps || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		r.Err = fmt.Errorf("warm-up, %d tries: %w", tries, err)
		return r
	}
	select {
	case <-time.After(gap):
	case <-ctx.Done():
		r.Err = ctx.Err()
		return r
	}
	var (
		mu    sync.Mutex // the trace's hooks run on the transport's goroutines
		first net.Conn   // the connection the request was first sent on
		wrote bool
	)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first, r.Reused, r.Idle = i.Conn, i.Reused, i.IdleTime
			}
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if dl, ok := readDeadline(first); ok && !wrote {
				r.Left, r.HasLeft = dl.Sub(now), true
			}
			wrote = true
		},
	})
	start := time.Now()
	status, err := send(ctx, s, rt, method, id)
	mu.Lock()
	defer mu.Unlock()
	r.Status, r.Err = status, err
	r.Elapsed = time.Since(start)
	r.Executions = s.Executions(id)
	return r
}

func send(ctx context.Context, s *Server, rt http.RoundTripper, method, id string) (int, error) {
	var body io.Reader
	if method != http.MethodGet {
		body = strings.NewReader(`{"spec":{"operatingMode":"Suspended"}}`)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+"/apis/agents.x-k8s.io/v1beta1/namespaces/demo/sandboxes/sb?id="+id, body)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}

// Config describes a sweep.
type Config struct {
	// Timeout is both client A's read timeout and client B's request
	// timeout.
	Timeout time.Duration
	Latency time.Duration
	Gaps    []time.Duration
	HTTP2   bool
	Log     logr.Logger
}

// Sweep runs, for every gap and for GET and PATCH, one probe with client A
// and one with client B, each on a fresh pool, all in parallel. Results are
// ordered by gap, then method, then client ("A" before "B").
func Sweep(ctx context.Context, cfg Config) ([]Result, error) {
	s := NewServer(cfg.Latency, cfg.HTTP2)
	defer s.Close()
	methods := []string{http.MethodGet, http.MethodPatch}
	results := make([]Result, len(cfg.Gaps)*len(methods)*2)
	var rts []http.RoundTripper
	defer func() {
		for _, rt := range rts {
			(&http.Client{Transport: rt}).CloseIdleConnections()
		}
	}()
	var wg sync.WaitGroup
	for gi, gap := range cfg.Gaps {
		for mi, method := range methods {
			for ci, client := range []string{"A", "B"} {
				var rt http.RoundTripper
				var err error
				if client == "A" {
					rt, err = NaiveClient(s, cfg.Timeout, cfg.Log)
				} else {
					rt, err = KubewireClient(s, cfg.Timeout, cfg.Log)
				}
				if err != nil {
					return nil, err
				}
				rts = append(rts, rt)
				i := (gi*len(methods)+mi)*2 + ci
				id := fmt.Sprintf("%s-%s-%d", client, method, gi)
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := Probe(ctx, s, rt, method, gap, id)
					r.Client = client
					results[i] = r
				}()
			}
		}
	}
	wg.Wait()
	// Client B's request of the same gap and method follows client A's.
	for i := 0; i+1 < len(results); i += 2 {
		results[i].Answered = results[i+1].Elapsed
	}
	return results, nil
}

// readDeadline returns the read deadline client A's connection c set last,
// through a TLS connection over it too.
func readDeadline(c net.Conn) (time.Time, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if d, ok := c.(interface{ ReadDeadline() time.Time }); ok {
		return d.ReadDeadline(), true
	}
	return time.Time{}, false
}

// left returns how long client A's read deadline had left when request r
// went out: measured on the connection when known, else the timeout less
// the idle time. Either way not the gap asked for, which a loaded machine
// overshoots.
func left(cfg Config, r Result) time.Duration {
	if r.HasLeft {
		return r.Left
	}
	return cfg.Timeout - r.Idle
}

// Starved reports whether client A's request r was sent on a pooled
// connection whose read timeout, counting the time the connection sat idle,
// had less time left than the server needs to answer.
func Starved(cfg Config, r Result) bool {
	return r.Client == "A" && r.Reused && left(cfg, r) > 0 && left(cfg, r) < cfg.Latency
}

// expired reports whether client A's pooled connection had outlived its
// own read timeout when the request went out: the connection was dying as
// it was handed over, and whether the request failed there or went out on
// a new connection is a race inside net/http, not the bug the sweep shows.
func expired(cfg Config, r Result) bool {
	return r.Client == "A" && r.Reused && left(cfg, r) <= 0
}

// tooClose reports whether client A's request r is too close to call: the
// server's latency left it time enough, but what an answer really took at
// that moment (r.Answered, client B's) did not.
// Then either outcome is the bug or its absence by a hair.
func tooClose(cfg Config, r Result) bool {
	if r.Client != "A" || r.Answered <= cfg.Latency {
		return false
	}
	loaded := cfg
	loaded.Latency = r.Answered
	return Starved(cfg, r) != Starved(loaded, r)
}

// mostRuns is how many times the server may have run client A's request r
// when its outcome proves nothing: twice for a GET over HTTP/1.1, which
// net/http re-sends by itself when the connection fails under it, else
// once.
func mostRuns(cfg Config, r Result) int {
	if r.Method == http.MethodGet && !cfg.HTTP2 {
		return 2
	}
	return 1
}

// Expect says what the field report predicts for r: client A fails when it
// is [Starved]; a GET that fails that way over HTTP/1.1 is silently re-sent
// by net/http and executed twice. Client B always succeeds and every
// request runs once. A request of client A sent on a connection idle past
// the whole read timeout (a loaded machine overshooting the gap), or too
// close to call (a loaded machine answering slower than the server's
// latency, [tooClose]), proves nothing either way; it must merely not run
// more often than net/http re-sends it. It returns a description of any
// difference.
func Expect(cfg Config, r Result) error {
	starved := Starved(cfg, r)
	switch {
	case expired(cfg, r) || tooClose(cfg, r):
		if r.Executions > mostRuns(cfg, r) {
			return fmt.Errorf("client A %s at gap %v (%v left of its read timeout, an answer taking %v): want at most %d executions, got %d", r.Method, r.Gap, left(cfg, r), r.Answered, mostRuns(cfg, r), r.Executions)
		}
	case r.Client == "B" || !starved:
		if r.Err != nil || r.Executions != 1 {
			return fmt.Errorf("client %s %s at gap %v: want success executed once, got err=%v executions=%d", r.Client, r.Method, r.Gap, r.Err, r.Executions)
		}
	case r.Method == http.MethodGet && !cfg.HTTP2:
		if r.Err != nil || r.Executions != 2 {
			return fmt.Errorf("client A GET at gap %v: want net/http's silent re-send (success, executed twice), got err=%v executions=%d", r.Gap, r.Err, r.Executions)
		}
	default:
		if r.Err == nil || r.Executions != 1 {
			return fmt.Errorf("client A %s at gap %v: want failure executed once, got err=%v executions=%d", r.Method, r.Gap, r.Err, r.Executions)
		}
	}
	return nil
}
