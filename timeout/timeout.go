package timeout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// New returns a middleware that gives every request its own deadline, d
// after RoundTrip is called, which ends when the response body is closed or
// read to EOF (see the package documentation). The RoundTrippers it returns
// are safe for concurrent use.
//
// An invalid timeout (zero or negative) or option does not panic: every
// request fails with an error naming it, without being sent.
func New(d time.Duration, opts ...Option) transport.Middleware {
	c := newConfig(d, opts)
	return func(next http.RoundTripper) http.RoundTripper {
		return &roundTripper{Wrapped: roundtrip.Wrap(next), cfg: c}
	}
}

type roundTripper struct {
	roundtrip.Wrapped
	cfg config
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.cfg.err != nil {
		roundtrip.CloseRequestBody(req)
		return nil, rt.cfg.err
	}
	ctx := req.Context()
	limit := rt.cfg.timeout
	if v, ok := ctx.Value(timeoutKey{}).(*timeoutValue); ok {
		switch {
		case v.none:
			return rt.Next.RoundTrip(req)
		case v.d <= 0:
			roundtrip.CloseRequestBody(req)
			return nil, &transport.ConfigError{Err: fmt.Errorf("timeout: the timeout of timeout.ContextWithTimeout must be positive, got %v", v.d)}
		}
		limit = v.d
	}
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(start) <= limit {
		// The caller's deadline comes first and bounds everything.
		return rt.Next.RoundTrip(req)
	}
	c := &call{start: start, limit: limit, phase: PhaseHeaders}
	if rt.cfg.observer != nil {
		c.req, c.observer = req, rt.cfg.observer
	}
	if rt.cfg.longRunning != nil && rt.cfg.longRunning(req) {
		c.longRunning = true
		c.stall = rt.cfg.stall
	}
	ctx, c.cancel = context.WithCancelCause(ctx)
	// The deadline starts here, when the request is handed to the
	// transport, and not when a connection is read from: a read deadline on
	// a pooled connection also counts the time it sat idle, so a request on
	// a connection idle for T gets only limit-T (the seed's bug). It stops
	// when the body is read to EOF or closed (call.Read, call.Close).
	c.mu.Lock()
	c.timer = time.AfterFunc(limit, c.fire)
	c.mu.Unlock()

	resp, err := rt.Next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		terr := c.cause(err)
		c.finish()
		return nil, terr
	}
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		c.stop()
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
			resp.Body = &upgradeBody{ReadWriteCloser: rwc, c: c}
		} else {
			c.body = resp.Body
			resp.Body = c
		}
	case resp.Body == nil || resp.Body == http.NoBody:
		c.finish()
	default:
		if c.longRunning {
			c.streaming()
		} else {
			c.setPhase(PhaseBody)
		}
		c.body = resp.Body
		resp.Body = c
	}
	return resp, nil
}

// call is the deadline state of one request. It doubles as the response
// body wrapper, saving an allocation per request.
type call struct {
	body        io.ReadCloser
	start       time.Time
	limit       time.Duration // the request's timeout
	longRunning bool
	stall       time.Duration
	cancel      context.CancelCauseFunc
	progress    atomic.Int64   // nanoseconds since start of the last body progress
	req         *http.Request  // for the observer only
	observer    func(Exceeded) // nil when there is none

	mu    sync.Mutex
	timer *time.Timer
	phase Phase
	done  bool
	err   *Error
}

func (c *call) fire() {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	elapsed := time.Since(c.start)
	limit := c.limit
	if c.phase == PhaseStalled {
		limit = c.stall
		if c.rearm(elapsed) {
			c.mu.Unlock()
			return
		}
	}
	c.err = &Error{Limit: limit, Elapsed: elapsed, Phase: c.phase}
	c.done = true
	err := c.err
	c.mu.Unlock()
	if c.observer != nil {
		c.observer(Exceeded{Request: c.req, Phase: err.Phase, Limit: limit, Elapsed: elapsed})
	}
	c.cancel(err)
}

func (c *call) setPhase(p Phase) {
	c.mu.Lock()
	if !c.done {
		c.phase = p
	}
	c.mu.Unlock()
}

// stop ends the deadline but keeps the context alive; used for upgrades,
// whose connection belongs to the caller until the body is closed.
func (c *call) stop() {
	c.mu.Lock()
	if !c.done {
		c.done = true
		c.timer.Stop()
	}
	c.mu.Unlock()
}

// finish ends the deadline and releases the request's context.
func (c *call) finish() {
	c.stop()
	c.cancel(errRequestDone)
}

var errRequestDone = errors.New("timeout: request done")

// cause returns the error to report for err: an *Error if the timeout ran
// out, err itself otherwise.
func (c *call) cause(err error) error {
	c.mu.Lock()
	te := c.err
	c.mu.Unlock()
	if te == nil {
		return err
	}
	var got *Error
	if errors.As(err, &got) && got == te {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return te
	}
	e := *te
	e.Err = err
	return &e
}

// Read reads the response body; EOF ends the deadline.
func (c *call) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	if n > 0 && c.stall > 0 {
		c.progress.Store(int64(time.Since(c.start)))
	}
	if err != nil {
		if err == io.EOF {
			c.finish()
			return n, err
		}
		return n, c.cause(err)
	}
	return n, nil
}

// Close closes the response body and ends the deadline.
func (c *call) Close() error {
	err := c.body.Close()
	c.finish()
	return err
}

// upgradeBody keeps the io.ReadWriteCloser of a 101 response and releases
// the request's context when the caller closes the connection.
type upgradeBody struct {
	io.ReadWriteCloser
	c *call
}

func (b *upgradeBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.c.finish()
	return err
}

// CloseWrite forwards to the upgraded connection, as net/http's own 101 body
// does.
func (b *upgradeBody) CloseWrite() error {
	if cw, ok := b.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", http.ErrNotSupported)
}
