package pooltrace

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/internal/hooks"
	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// DefaultVerbosity is the logr verbosity of the per-attempt line.
const DefaultVerbosity = 4

// Option configures [New].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	logger    logr.Logger
	verbosity int
	observer  func(Attempt)
	err       error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = &transport.ConfigError{Err: fmt.Errorf("pooltrace: "+format, args...)}
	}
}

// WithLogger sets the logger used when the request's context carries none
// (logr.FromContext). Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithVerbosity sets the logr verbosity of the line logged for every
// attempt. Failures on reused connections are logged at V(0) regardless.
// Default: [DefaultVerbosity]. Must not be negative.
func WithVerbosity(v int) Option {
	return optionFunc(func(c *config) {
		c.verbosity = v
		if v < 0 {
			c.fail("WithVerbosity must not be negative, got %d", v)
		}
	})
}

// WithObserver calls f once for every attempt, when RoundTrip returns, for
// example to feed metrics. f runs on the caller's goroutine and must not
// block; it must not keep the Attempt's Earlier slice. Observers add up:
// each one given is called, in order. Must not be nil. Default: none.
func WithObserver(f func(Attempt)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithObserver must not be nil")
			return
		}
		c.observer = hooks.Then(c.observer, f)
	})
}

func newConfig(opts []Option) config {
	c := config{logger: logr.Discard(), verbosity: DefaultVerbosity}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Check reports the error that New(opts...) would return from every
// request, or nil if the options are valid.
func Check(opts ...Option) error {
	c := newConfig(opts)
	return c.err
}

// New returns a middleware that traces every attempt (see the package
// documentation). The RoundTrippers it returns are safe for concurrent use.
//
// Invalid options do not panic: every request fails with an error naming
// the option, without being sent.
func New(opts ...Option) transport.Middleware {
	c := newConfig(opts)
	return func(next http.RoundTripper) http.RoundTripper {
		return &roundTripper{Wrapped: roundtrip.Wrap(next), cfg: c}
	}
}

type roundTripper struct {
	roundtrip.Wrapped
	cfg config
}

// TracesConnections marks the RoundTripper as one whose errors name the
// connection (roundtrip.ConnTracer): retry above it adds no trace.
func (rt *roundTripper) TracesConnections() {}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.cfg.err != nil {
		roundtrip.CloseRequestBody(req)
		return nil, rt.cfg.err
	}
	log, lerr := logr.FromContext(req.Context())
	if lerr != nil {
		log = rt.cfg.logger
	}
	t := &tracer{}
	t.a = Attempt{Method: req.Method, Start: time.Now()}
	if rt.cfg.observer != nil {
		t.a.Request = req
	}
	if req.URL != nil {
		t.a.Host, t.a.Path = req.URL.Host, req.URL.Path
	}
	// The connection is always recorded: errors carry it, and whether
	// net/http looked for one and handed none, which proves the request
	// unsent. The timings of the phases cost a hook each, so they are
	// recorded only for a reader: an observer, or a logger that logs
	// every attempt.
	t.trace.GetConn = t.getConn
	t.trace.GotConn = t.gotConn
	verbose := log.V(rt.cfg.verbosity).Enabled()
	if rt.cfg.observer != nil || verbose {
		t.timed = true
		t.trace.TLSHandshakeStart = t.tlsStart
		t.trace.WroteRequest = t.wroteRequest
		t.trace.GotFirstResponseByte = t.firstByte
	}
	ctx := httptrace.WithClientTrace(req.Context(), &t.trace)

	resp, err := rt.Next.RoundTrip(req.WithContext(ctx))
	if err != nil && roundtrip.IsConfigError(err) {
		// Nothing was attempted: a middleware below was built with
		// invalid options.
		return nil, err
	}

	t.mu.Lock()
	t.a.Duration = time.Since(t.a.Start)
	if err != nil {
		t.a.Err = err
	} else {
		t.a.StatusCode = resp.StatusCode
	}
	switch {
	case !t.a.HasConn:
	case resp != nil && resp.Proto != "":
		t.a.Conn.Proto = resp.Proto
	default:
		t.a.Conn.Proto = protoOf(t.conn)
	}
	a := t.a
	var key roundtrip.ConnKey
	unsent := err != nil && t.asked && !t.a.HasConn
	wrapBody := err == nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil && resp.Body != http.NoBody
	if err != nil {
		key = t.failedOn()
	}
	if !wrapBody {
		t.conn = nil
	}
	t.mu.Unlock()

	rt.report(log, a, t.timed, verbose)
	if err != nil {
		a.Err, a.Request = nil, nil
		return nil, &Error{Attempt: a, Err: err, conn: key, unsent: unsent}
	}
	if wrapBody {
		t.body = resp.Body
		resp.Body = t
	}
	return resp, nil
}

func (rt *roundTripper) report(log logr.Logger, a Attempt, timed, verbose bool) {
	if rt.cfg.observer != nil {
		rt.cfg.observer(a)
	}
	switch {
	case a.Err != nil && a.HasConn && a.Conn.Reused:
		log.Info("request failed on a reused connection", append(keysAndValues(a, timed), "err", a.Err)...)
	case len(a.Earlier) > 0:
		log.Info("net/http re-sent the request on another connection after a failure on a reused one; the server may have executed it twice", keysAndValues(a, timed)...)
	case verbose:
		kv := keysAndValues(a, timed)
		if a.Err != nil {
			kv = append(kv, "err", a.Err)
		}
		log.V(rt.cfg.verbosity).Info("request attempt", kv...)
	}
}

// keysAndValues is the log line of a; the timings only when they were
// recorded.
func keysAndValues(a Attempt, timed bool) []any {
	kv := []any{
		"method", a.Method, "host", a.Host, "path", a.Path,
		"status", a.StatusCode, "duration", a.Duration,
	}
	if a.HasConn {
		kv = append(kv,
			"proto", a.Conn.Proto, "reused", a.Conn.Reused,
			"wasIdle", a.Conn.WasIdle, "idleTime", a.Conn.IdleTime,
			"localAddr", addr(a.Conn.LocalAddr), "remoteAddr", addr(a.Conn.RemoteAddr),
			"gotConn", a.GotConn,
		)
		if timed {
			kv = append(kv, "dial", a.Dial, "tlsHandshake", a.TLSHandshake, "wroteRequest", a.WroteRequest, "firstByte", a.FirstByte)
		}
	}
	if len(a.Earlier) > 0 {
		earlier := make([]string, len(a.Earlier))
		for i, c := range a.Earlier {
			earlier[i] = c.String()
		}
		kv = append(kv, "earlierConns", earlier)
	}
	return kv
}

func addr(a interface{ String() string }) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// tracer collects one attempt. The httptrace hooks run on net/http's
// goroutines, so every field is guarded by mu. It doubles as the response
// body wrapper, saving an allocation per request.
type tracer struct {
	trace httptrace.ClientTrace
	timed bool // the phases are hooked
	mu    sync.Mutex
	asked bool // net/http looked for a connection (GetConn)
	a     Attempt
	// conn is the connection of a.Conn, until RoundTrip returns or, for a
	// response with a body, the body is closed. Its protocol is read from
	// it only when no response says it, and its key only when an attempt
	// fails: naming a connection costs nine allocations, which a request
	// that succeeds does not pay.
	conn     net.Conn
	tlsBegin time.Time

	body io.ReadCloser
}

func (t *tracer) gotConn(info httptrace.GotConnInfo) {
	now := time.Now()
	c := ConnInfo{
		Reused:   info.Reused,
		WasIdle:  info.WasIdle,
		IdleTime: info.IdleTime,
	}
	if info.Conn != nil {
		c.LocalAddr, c.RemoteAddr = info.Conn.LocalAddr(), info.Conn.RemoteAddr()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.a.HasConn {
		t.a.Conn.Proto = protoOf(t.conn)
		t.a.Earlier = append(t.a.Earlier, t.a.Conn)
		t.a.WroteRequest, t.a.FirstByte = 0, 0
	}
	t.conn = info.Conn
	t.a.HasConn = true
	t.a.Conn = c
	t.a.GotConn = now.Sub(t.a.Start)
	t.a.Dial, t.a.TLSHandshake = 0, 0
	if !c.Reused && t.timed {
		// TLSHandshakeDone is not hooked: the handshake ends right before
		// the connection is handed over, and one hook fewer is one
		// allocation fewer per request.
		if !t.tlsBegin.IsZero() && !t.tlsBegin.After(now) {
			t.a.TLSHandshake = now.Sub(t.tlsBegin)
		}
		t.a.Dial = t.a.GotConn - t.a.TLSHandshake
	}
	t.tlsBegin = time.Time{}
}

func (t *tracer) getConn(string) {
	t.mu.Lock()
	t.asked = true
	t.mu.Unlock()
}

func (t *tracer) tlsStart() {
	t.mu.Lock()
	t.tlsBegin = time.Now()
	t.mu.Unlock()
}

func (t *tracer) wroteRequest(httptrace.WroteRequestInfo) {
	t.mu.Lock()
	t.a.WroteRequest = time.Since(t.a.Start)
	t.mu.Unlock()
}

func (t *tracer) firstByte() {
	t.mu.Lock()
	t.a.FirstByte = time.Since(t.a.Start)
	t.mu.Unlock()
}

// protoOf returns the protocol a connection speaks, by the protocol its TLS
// handshake negotiated: for an attempt no response describes.
func protoOf(c net.Conn) string {
	if tc, ok := c.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
		return "HTTP/2.0"
	}
	return "HTTP/1.1"
}

// Read reads the response body and annotates its errors with the connection.
func (t *tracer) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if err != nil && err != io.EOF {
		t.mu.Lock()
		a, key := t.a, t.failedOn()
		t.mu.Unlock()
		a.Request = nil
		return n, &Error{Attempt: a, Err: err, conn: key}
	}
	return n, err
}

// failedOn returns the key of t.conn, the zero key if there is none. t.mu
// must be held.
func (t *tracer) failedOn() roundtrip.ConnKey {
	key, _ := roundtrip.KeyOf(t.conn)
	return key
}

// Close closes the response body and lets go of its connection.
func (t *tracer) Close() error {
	t.mu.Lock()
	t.conn = nil
	t.mu.Unlock()
	return t.body.Close()
}
