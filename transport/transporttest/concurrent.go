package transporttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// The concurrent case: goroutines share one RoundTripper, each sending
// perGoroutine requests in turn.
const (
	goroutines   = 32
	perGoroutine = 4
)

// mode is what a request of the concurrent case asks of the server and does
// with the answer.
type mode string

const (
	modeOK           mode = "ok"            // a 200 with a short body, read to the end
	modeStatus       mode = "status"        // one of statuses, read to the end
	modeCancelHeader mode = "cancel-header" // cancelled once the server has it, before any answer
	modeCancelBody   mode = "cancel-body"   // cancelled after the first line of the body
	modePartial      mode = "partial"       // closed after the first line of the body
)

var modes = []mode{modeOK, modeStatus, modeCancelHeader, modeCancelBody, modePartial}

// call is one request of the concurrent case. Its number decides its method
// and mode, so that every mode runs with GET and with POST.
type call struct {
	id      int
	method  string
	mode    mode
	payload string // what body reads
	body    *body  // nil for GET
}

func newCall(id int) *call {
	c := &call{id: id, method: http.MethodGet, mode: modes[(id/2)%len(modes)]}
	if id%2 == 1 {
		c.method = http.MethodPost
		c.payload = fmt.Sprintf("body of %d", id)
		c.body = newBody(c.payload)
	}
	return c
}

// line is the line the server answers c with, made of everything that
// identifies c, so that a response delivered to the wrong request shows.
func (c *call) line() string { return echoLine(strconv.Itoa(c.id), c.method, c.payload) }

func echoLine(id, method, body string) string {
	return fmt.Sprintf("%s %s %q\n", id, method, body)
}

// statuses are the answers of modeStatus, each with GET and with POST:
// those a middleware is tempted to act on, an overload (429, 503, with
// Retry-After) and a failure (500), and one it has no reason to (404). A
// middleware that retries one must close the body of each answer it does
// not pass on, or its connection never returns to the pool.
var statuses = []int{http.StatusNotFound, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable}

func (c *call) status() int {
	// Ids of one mode come in pairs, a GET and a POST, len(modes)*2 apart.
	return statuses[c.id/(2*len(modes))%len(statuses)]
}

// echo is the server of the concurrent case. Every answer is made of
// echoLine of the request, whatever the mode.
type echo struct {
	arrived sync.Map      // id -> chan struct{}, closed when that request arrives
	stop    chan struct{} // closed when the test ends, for handlers still waiting
}

func (s *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client gave up
	}
	q := r.URL.Query()
	id := q.Get("id")
	line := echoLine(id, r.Method, string(body))
	w.Header().Set("X-Contract-Id", id)
	switch mode(q.Get("mode")) {
	case modeOK:
		_, _ = io.WriteString(w, line)
	case modeStatus:
		code, _ := strconv.Atoi(q.Get("status"))
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, line)
	case modeCancelHeader:
		if ch, ok := s.arrived.LoadAndDelete(id); ok {
			close(ch.(chan struct{}))
		}
		s.wait(r)
	case modeCancelBody, modePartial:
		// One line, then the stream stays open, so that the cancel or the
		// close cuts it rather than finding it complete in a buffer.
		_, _ = io.WriteString(w, line)
		_ = http.NewResponseController(w).Flush()
		s.wait(r)
	}
}

// wait holds a request until the client cancels it or closes its body.
func (s *echo) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.stop:
	}
}

// concurrent sends requests of every mode from many goroutines through one
// RoundTripper and checks each response or error on its own, then that every
// body, request and response, was closed.
func concurrent(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	s := &echo{stop: make(chan struct{})}
	servers := NewServers(t, s).All()
	// Registered after NewServers, so it runs before the servers wait for their
	// handlers.
	t.Cleanup(func() { close(s.stop) })
	for _, srv := range servers {
		t.Run(srv.Name, func(t *testing.T) {
			base := &recorder{Wrapped: roundtrip.Wrapped{Next: srv.Base}}
			rt := mw(base)
			// Cancelled only if the hang guard runs out, to let the
			// goroutines finish and report.
			ctx, abandon := context.WithCancel(context.Background())
			defer abandon()
			rep := &reporter{t: t, running: map[int]bool{}}
			calls := make([]*call, goroutines*perGoroutine)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range perGoroutine {
						c := newCall(g*perGoroutine + i)
						calls[c.id] = c
						rep.start(c.id)
						c.run(ctx, rep, rt, srv, s)
						rep.finish(c.id)
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(patience):
				t.Errorf("requests still running after %v; cancelling them", patience)
				abandon()
				select {
				case <-done:
				case <-time.After(patience):
					// Those goroutines are left behind, for the caller's
					// goleak to report; they report nothing more here.
					t.Errorf("requests %v still running %v after they were cancelled: the middleware ignores their context", rep.giveUp(), patience)
					return
				}
			}

			// net/http may close a request body after RoundTrip returns.
			var open []int
			if !eventually(func() bool {
				open = open[:0]
				for _, c := range calls {
					if c.body != nil && !c.body.Closed() {
						open = append(open, c.id)
					}
				}
				return len(open) == 0
			}) {
				t.Errorf("requests whose bodies are not closed: %v", open)
			}
			var unclosed []string
			if !eventually(func() bool { unclosed = base.open(); return len(unclosed) == 0 }) {
				t.Errorf("requests whose response bodies from the pool are not closed, each a connection that never returns to it: %v", unclosed)
			}
			if n := base.closes.Load(); n > 0 {
				t.Errorf("the middleware emptied the pool itself %d times, when no caller called CloseIdleConnections: every request in flight then dials anew", n)
			}
		})
	}
}

// reporter passes the concurrent case's failures to t and tracks which
// requests are running, until the case gives up on those still running: a
// report from one of them after the test ended would panic.
type reporter struct {
	t       *testing.T
	mu      sync.Mutex
	running map[int]bool
	gaveUp  bool
}

func (r *reporter) start(id int) {
	r.mu.Lock()
	r.running[id] = true
	r.mu.Unlock()
}

func (r *reporter) finish(id int) {
	r.mu.Lock()
	delete(r.running, id)
	r.mu.Unlock()
}

// giveUp silences r and returns the ids of the requests still running.
func (r *reporter) giveUp() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaveUp = true
	ids := make([]int, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (r *reporter) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.gaveUp {
		r.t.Errorf(format, args...)
	}
}

func (r *reporter) Error(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.gaveUp {
		r.t.Error(args...)
	}
}

// run sends c through rt and checks what comes back. It runs on a goroutine
// of its own, so it reports with t.Errorf and returns, never t.Fatal.
func (c *call) run(ctx context.Context, t *reporter, rt http.RoundTripper, srv Server, s *echo) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	u := fmt.Sprintf("%s/things/%d?id=%d&mode=%s&status=%d", srv.URL, c.id, c.id, c.mode, c.status())
	var body io.Reader
	if c.body != nil {
		body = c.body
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, body)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("X-Contract-Id", strconv.Itoa(c.id))
	wantHeader := req.Header.Clone()
	what := fmt.Sprintf("request %d (%s, %s)", c.id, c.method, c.mode)

	var resp *http.Response
	if c.mode == modeCancelHeader {
		arrived := make(chan struct{})
		s.arrived.Store(strconv.Itoa(c.id), arrived)
		returned := make(chan struct{})
		var canceller sync.WaitGroup
		canceller.Go(func() {
			select {
			case <-arrived:
				cancel()
			case <-returned:
			}
		})
		resp, err = rt.RoundTrip(req)
		close(returned)
		canceller.Wait()
	} else {
		resp, err = rt.RoundTrip(req)
	}

	if req.Method != c.method {
		t.Errorf("%s: method changed to %q", what, req.Method)
	}
	if got := req.URL.String(); got != u {
		t.Errorf("%s: URL changed to %q", what, got)
	}
	if !reflect.DeepEqual(req.Header, wantHeader) {
		t.Errorf("%s: headers changed to %v, were %v", what, req.Header, wantHeader)
	}
	if c.body != nil && req.Body != io.ReadCloser(c.body) {
		t.Errorf("%s: body replaced by a %T", what, req.Body)
	}
	switch {
	case err != nil && resp != nil:
		t.Errorf("%s: a response (%d) came with the error %v", what, resp.StatusCode, err)
		_ = resp.Body.Close()
		return
	case err != nil:
		if c.mode == modeCancelHeader {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, not context.Canceled", what, err)
			}
		} else {
			t.Errorf("%s: %v", what, err)
		}
		return
	case resp == nil:
		t.Errorf("%s: neither a response nor an error", what)
		return
	}
	defer func() {
		if err := resp.Body.Close(); err != nil {
			t.Errorf("%s: closing the response body: %v", what, err)
		}
	}()
	if c.mode == modeCancelHeader {
		t.Errorf("%s: a response (%d) to a request cancelled before the server answered", what, resp.StatusCode)
		return
	}
	if resp.ProtoMajor != srv.ProtoMajor {
		t.Errorf("%s: a response over HTTP/%d from the %s server", what, resp.ProtoMajor, srv.Name)
	}
	if got := resp.Header.Get("X-Contract-Id"); got != strconv.Itoa(c.id) {
		t.Errorf("%s: the response to request %s", what, got)
	}
	want := http.StatusOK
	if c.mode == modeStatus {
		want = c.status()
	}
	if resp.StatusCode != want {
		t.Errorf("%s: status %d, want %d", what, resp.StatusCode, want)
	}

	line := c.line()
	switch c.mode {
	case modeOK, modeStatus:
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Errorf("%s: reading the body: %v", what, err)
		}
		if string(b) != line {
			t.Errorf("%s: body %q, want %q", what, b, line)
		}
	case modeCancelBody, modePartial:
		first := make([]byte, len(line))
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Errorf("%s: reading the first line of the body: %v", what, err)
		}
		if string(first) != line {
			t.Errorf("%s: first line of the body %q, want %q", what, first, line)
		}
		if c.mode == modePartial {
			return
		}
		cancel()
		rest, err := io.ReadAll(resp.Body)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: reading on after the cancel: %v, not context.Canceled", what, err)
		}
		if len(rest) != 0 {
			t.Errorf("%s: %q after the cancel; the server sent one line only", what, rest)
		}
	}
}

// recorder is the base transport of the concurrent case. It records every
// response body the pool hands out, to check that the middleware closes
// each one, including those it never passes on, and counts the
// CloseIdleConnections calls that reach it, which in this case no caller
// makes.
type recorder struct {
	roundtrip.Wrapped
	mu     sync.Mutex
	bodies []*recordedBody
	closes atomic.Int32
}

func (r *recorder) CloseIdleConnections() {
	r.closes.Add(1)
	r.Wrapped.CloseIdleConnections()
}

type recordedBody struct {
	io.ReadCloser
	id     string
	closed atomic.Bool
}

func (b *recordedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.Next.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	b := &recordedBody{ReadCloser: resp.Body, id: req.URL.Query().Get("id")}
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// open returns the ids of the requests whose response bodies are not closed.
func (r *recorder) open() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, b := range r.bodies {
		if !b.closed.Load() {
			ids = append(ids, b.id)
		}
	}
	return ids
}
