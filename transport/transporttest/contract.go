package transporttest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/conntrack"
	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// patience bounds every wait for something that must happen. It is a hang
// guard, not a measurement: far above what a loaded machine needs.
var patience = 30 * time.Second

// TestMiddleware checks that mw honours net/http's RoundTripper contract,
// against real loopback servers over HTTP/1.1 and HTTP/2 (TLS). mw wraps
// the RoundTripper it is given, as a middleware for stack's
// WithCallMiddleware or WithAttemptMiddleware, transport.Chain or
// client-go's rest.Config.Wrap does; a transport.Middleware and a
// client-go transport.WrapperFunc are both accepted as they are.
//
// Each property is a subtest, run over both protocols unless it says
// otherwise (the package documentation says why each matters):
//
//   - RequestNotModified: the caller's request comes back as it went in:
//     method, URL, Host, header map and values, context, body.
//   - BodyClosedOnError: the request body is closed when the request fails:
//     a refused connection, a context cancelled before the send, a server
//     that drops the request.
//   - StatusIsNotError: a 500 is a response with its body, not an error.
//   - Upgrade: a 101 Switching Protocols response's body stays an
//     io.ReadWriteCloser that carries bytes both ways (HTTP/1.1 only:
//     HTTP/2 has no 101).
//   - Wrapper: the RoundTripper implements WrappedRoundTripper, through
//     which a walk of at most 1,000 steps reaches the one mw was given,
//     and forwards each CloseIdleConnections to it once, down to the
//     pool. A middleware that returns what it is given, as
//     transport.Chain() does, passes as it is.
//   - NilNext: mw(nil) sends through http.DefaultTransport, as http.Client
//     does with a nil Transport, instead of panicking, or is nil itself,
//     as the identity's is (HTTP/1.1 only: http.DefaultTransport trusts
//     no test certificate).
//   - Concurrent: 32 goroutines share one RoundTripper for 128 requests of
//     GET and POST mixed with error statuses, cancellations before the
//     answer and during the body, and bodies closed half read; each gets
//     its own response or the error its cancellation caused, the caller's
//     request is not modified, and every body is closed, the request's and
//     every response body the base handed out, including those mw never
//     passed on.
//
// Failures are reported on t; TestMiddleware returns when every subtest
// has. It starts goroutines and servers that stop before it returns,
// except what net/http keeps for idle connections of http.DefaultTransport,
// which it closes; goroutine leaks of mw itself are left to the caller's
// TestMain (go.uber.org/goleak).
func TestMiddleware(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	t.Helper()
	t.Run("RequestNotModified", func(t *testing.T) { requestNotModified(t, mw) })
	t.Run("BodyClosedOnError", func(t *testing.T) { bodyClosedOnError(t, mw) })
	t.Run("StatusIsNotError", func(t *testing.T) { statusIsNotError(t, mw) })
	// RFC 9113 section 8.6: HTTP/2 has no 101 Switching Protocols. Go's
	// HTTP/2 server cannot hijack a stream, and its client refuses a request
	// with an Upgrade header (a WebSocket upgrade to an https URL gets an
	// HTTP/1.1 connection of its own), so there is no HTTP/2 case to run.
	t.Run("Upgrade", func(t *testing.T) { t.Run("HTTP/1.1", func(t *testing.T) { upgrade(t, mw) }) })
	t.Run("Wrapper", func(t *testing.T) { wrapper(t, mw) })
	t.Run("NilNext", func(t *testing.T) { nilNext(t, mw) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, mw) })
}

// eachProtocol serves h over HTTP/1.1 and over HTTP/2 and runs f as a
// subtest for each, named by its protocol.
func eachProtocol(t *testing.T, h http.Handler, f func(*testing.T, Server)) {
	t.Helper()
	for _, srv := range NewServers(t, h).All() {
		t.Run(srv.Name, func(t *testing.T) { f(t, srv) })
	}
}

// eventually reports whether cond holds within patience, polling it.
// net/http closes a request body on its write goroutine, and HTTP/2 forgets
// a finished stream on one of its own, so what the suite checks after a
// RoundTrip may come true a little after it returns.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// body is a request body that records whether it was closed.
type body struct {
	io.Reader
	closed atomic.Int32
}

func newBody(s string) *body { return &body{Reader: strings.NewReader(s)} }

func (b *body) Close() error {
	b.closed.Add(1)
	return nil
}

func (b *body) Closed() bool { return b.closed.Load() > 0 }

// drain reads resp's body to the end and closes it.
func drain(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("reading the response body: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Errorf("closing the response body: %v", err)
	}
	return string(b)
}

// roundTrip sends req through rt and fails t unless a response, and only a
// response, comes back, of protocol srv speaks.
func roundTrip(t *testing.T, rt http.RoundTripper, req *http.Request, srv Server) *http.Response {
	t.Helper()
	resp, err := rt.RoundTrip(req)
	switch {
	case err != nil && resp != nil:
		_ = resp.Body.Close()
		t.Fatalf("a response (%d) came with the error %v", resp.StatusCode, err)
	case err != nil:
		t.Fatalf("RoundTrip: %v", err)
	case resp == nil:
		t.Fatal("RoundTrip returned neither a response nor an error")
	}
	if resp.ProtoMajor != srv.ProtoMajor {
		t.Errorf("a response over HTTP/%d from the %s server", resp.ProtoMajor, srv.Name)
	}
	return resp
}

// requestNotModified: net/http's RoundTripper doc forbids modifying the
// request, because the caller owns it and may use it after RoundTrip
// returns (http.Client copies its headers onto a redirect); otelhttp's
// TestTransportOriginRequestNotModify checks the same.
func requestNotModified(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	eachProtocol(t, h, func(t *testing.T, srv Server) {
		rt := mw(srv.Base)

		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "v")
		b := newBody(`{"a":1}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL+"/apis/x/v1/namespaces/ns/things/a?q=1", b)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("Content-Type", "application/merge-patch+json")
		wantHeader := req.Header.Clone()
		wantURL := req.URL.String()
		wantHost := req.Host
		header := req.Header

		drain(t, roundTrip(t, rt, req, srv))

		if req.Method != http.MethodPatch {
			t.Errorf("method changed to %q", req.Method)
		}
		if got := req.URL.String(); got != wantURL {
			t.Errorf("URL changed to %q, was %q", got, wantURL)
		}
		if req.Host != wantHost {
			t.Errorf("Host changed to %q, was %q", req.Host, wantHost)
		}
		if !reflect.DeepEqual(req.Header, wantHeader) {
			t.Errorf("headers changed to %v, were %v", req.Header, wantHeader)
		}
		if !sameMap(header, req.Header) {
			t.Error("header map replaced")
		}
		if req.Context() != ctx {
			t.Error("context replaced")
		}
		if req.Body != io.ReadCloser(b) {
			t.Errorf("body replaced by a %T", req.Body)
		}
		if !eventually(b.Closed) {
			t.Error("request body not closed")
		}
	})
}

// sameMap reports whether a and b are the same map, not equal copies.
func sameMap(a, b http.Header) bool {
	a["X-Contract-Probe"] = nil
	_, ok := b["X-Contract-Probe"]
	delete(a, "X-Contract-Probe")
	return ok
}

// bodyClosedOnError: net/http's RoundTripper doc requires the request body
// to be closed "even on errors"; a body left open is a file, a pipe or a
// goroutine leaked on every failed request, and failed requests come in
// bursts.
func bodyClosedOnError(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	// The server takes the request and its body, then drops it without an
	// answer: HTTP/1.1 closes the connection, HTTP/2 resets the stream.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler)
	})
	eachProtocol(t, h, func(t *testing.T, srv Server) {
		rt := mw(srv.Base)
		scheme, _, _ := strings.Cut(srv.URL, "://")
		refused := scheme + strings.TrimPrefix(RefusedURL(t), "http") + "/"

		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		tests := []struct {
			name string
			ctx  context.Context
			url  string
		}{
			{"connection refused", context.Background(), refused},
			{"cancelled before it is sent", cancelled, refused},
			{"dropped by the server", context.Background(), srv.URL + "/"},
		}
		for _, tt := range tests {
			b := newBody("payload")
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodPost, tt.url, b)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil {
				t.Errorf("%s: no error", tt.name)
			}
			if resp != nil {
				t.Errorf("%s: a response (%d) came with the error %v", tt.name, resp.StatusCode, err)
				_ = resp.Body.Close()
			}
			if !eventually(b.Closed) {
				t.Errorf("%s: request body not closed", tt.name)
			}
		}
	})
}

// statusIsNotError: net/http's RoundTripper doc says a RoundTripper
// "should not attempt to interpret the response"; client-go reads the
// Status object in a 4xx or 5xx body, and retries a 429, or a 5xx with
// Retry-After, itself, so a middleware that turns a status into an error
// hides both. The statuses are those a retrying middleware is most
// tempted to take: 429 and 503 with Retry-After (API Priority and
// Fairness, a draining API server), and a plain 500.
func statusIsNotError(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if code != http.StatusInternalServerError {
			w.Header().Set("Retry-After", "0")
		}
		http.Error(w, "boom", code)
	})
	eachProtocol(t, h, func(t *testing.T, srv Server) {
		rt := mw(srv.Base)
		for _, code := range []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"?code="+strconv.Itoa(code), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp := roundTrip(t, rt, req, srv)
			if resp.StatusCode != code {
				t.Errorf("status %d, want %d", resp.StatusCode, code)
			}
			if got := drain(t, resp); got != "boom\n" {
				t.Errorf("%d: body %q, want %q", code, got, "boom\n")
			}
		}
	})
}

// upgrade: client-go's exec, attach and port-forward send an upgrade
// request and write the stream through the 101 response's body.
func upgrade(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	base := newBase(t)
	echoes(t, Upgrade(t, mw(base), NewUpgradeServer(t)))
}

func newBase(t testing.TB) *http.Transport {
	t.Helper()
	base, err := transport.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(base.CloseIdleConnections)
	return base
}

// maxDepth bounds the Wrapper case's walk down a chain: far more layers
// than any real stack has, few enough to fail at once on a cycle.
const maxDepth = 1000

// counting is the base of the Wrapper case: it counts the
// CloseIdleConnections calls that reach it.
type counting struct {
	http.RoundTripper
	closes atomic.Int32
}

func (c *counting) CloseIdleConnections() {
	c.closes.Add(1)
	roundtrip.CloseIdleConnections(c.RoundTripper)
}

// wrapper: apimachinery's utilnet.CloseIdleConnectionsFor and
// utilnet.RoundTripperFor walk a chain through WrappedRoundTripper, to
// close a client's idle connections when its credentials rotate or to find
// the transport beneath; a wrapper without it hides the pool. Closing must
// reach the pool exactly once per call, and never come from the middleware
// itself (go-retryablehttp's issues 85, 98 and 237).
func wrapper(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	eachProtocol(t, h, func(t *testing.T, srv Server) {
		var conns conntrack.Conns
		srv.Base.DialContext = conns.Dial(srv.Base.DialContext)
		base := &counting{RoundTripper: srv.Base}
		rt := mw(base)
		// Walk down as apimachinery's utilnet does, to the base. A
		// middleware that returns next as it is, as transport.Chain() does,
		// has nothing to walk. The walk is bounded: a wrapper that returns
		// itself, or any cycle, would hang utilnet's walk as it would this.
		// Only the base is compared: a RoundTripper may be a func, which
		// == would panic on.
		inner := rt
		for steps := 0; inner != http.RoundTripper(base); steps++ {
			if steps == maxDepth {
				t.Fatalf("no base after %d WrappedRoundTripper calls below %T: a cycle", maxDepth, rt)
			}
			w, ok := inner.(interface{ WrappedRoundTripper() http.RoundTripper })
			if !ok {
				if steps == 0 {
					t.Fatalf("%T does not implement WrappedRoundTripper", rt)
				}
				t.Fatalf("%T, below %T, does not implement WrappedRoundTripper", inner, rt)
			}
			inner = w.WrappedRoundTripper()
		}
		c, ok := rt.(interface{ CloseIdleConnections() })
		if !ok {
			t.Fatalf("%T does not implement CloseIdleConnections", rt)
		}

		// A connection in the pool, which the call must reach and close.
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		drain(t, roundTrip(t, rt, req, srv))
		if n := conns.Dialed(); n != 1 {
			t.Fatalf("%d connections dialed for one request, want 1", n)
		}

		// HTTP/2 forgets a finished stream on a goroutine of its own, so the
		// connection may still look busy to the first call.
		var calls atomic.Int32
		closed := func() bool {
			calls.Add(1)
			c.CloseIdleConnections()
			select {
			case <-conns.Closed(0):
				return true
			default:
				return false
			}
		}
		if !eventually(closed) {
			t.Fatal("CloseIdleConnections did not close the idle connection")
		}
		if got, want := base.closes.Load(), calls.Load(); got != want {
			t.Errorf("%d CloseIdleConnections reached the base for %d calls; each must reach it once", got, want)
		}
	})
}

// nilNext: http.Client sends through http.DefaultTransport when its
// Transport is nil, and client-go's transport.Wrappers hands a wrapper
// whatever it has; a middleware that panics on nil, or sends nowhere,
// breaks the first request rather than the constructor.
func nilNext(t *testing.T, mw func(http.RoundTripper) http.RoundTripper) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		defer def.CloseIdleConnections()
	}
	rt, ok := noPanic(t, "applied to nil", func() http.RoundTripper { return mw(nil) })
	if !ok {
		return
	}
	if rt == nil {
		// Only the identity, as transport.Chain() is, may hand nil back:
		// the caller is left with the nil it had, which http.Client reads
		// as http.DefaultTransport. A middleware that returns nil for nil
		// but wraps anything else would panic on its first request.
		probe := &counting{}
		if got, ok := noPanic(t, "applied to a RoundTripper", func() http.RoundTripper { return mw(probe) }); ok && got != probe {
			t.Error("a middleware applied to nil returned nil, but is not the identity: it must wrap http.DefaultTransport")
		}
		return
	}
	if !roundtrip.Holds(rt, func(rt http.RoundTripper) bool { return rt == http.DefaultTransport }) {
		t.Error("a middleware applied to nil must wrap http.DefaultTransport")
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	_, ok = noPanic(t, "applied to nil, on its first request", func() http.RoundTripper {
		resp, err = rt.RoundTrip(req)
		return nil
	})
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("a request through a middleware applied to nil: %v", err)
	}
	if got := drain(t, resp); got != "ok" {
		t.Errorf("body %q, want %q", got, "ok")
	}
}

// noPanic runs f and reports, as a failure of t, a panic in it.
func noPanic(t *testing.T, what string, f func() http.RoundTripper) (rt http.RoundTripper, ok bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("the middleware panicked %s: %v", what, r)
			ok = false
		}
	}()
	return f(), true
}
