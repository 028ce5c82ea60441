package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

type roundTripper struct {
	roundtrip.Wrapped
	cfg config
	// traced is set when a RoundTripper below names the failed connection
	// in its errors (pooltrace; roundtrip.ConnTracer), so the request needs
	// no trace of its own. It is learnt from the chain, not from an error,
	// because the trace must be in place before the first attempt.
	traced bool
}

func newRoundTripper(next http.RoundTripper, c config) *roundTripper {
	return &roundTripper{Wrapped: roundtrip.Wrap(next), cfg: c, traced: roundtrip.TracesConnections(next)}
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.cfg.err != nil {
		roundtrip.CloseRequestBody(req)
		return nil, rt.cfg.err
	}
	if roundtrip.IsUpgrade(req) {
		return rt.Next.RoundTrip(req)
	}
	req = unreplayable(req, rt.cfg.resendable)
	if rt.cfg.exempt != nil && rt.cfg.exempt(req) {
		return rt.Next.RoundTrip(req)
	}
	req = markBody(req)
	if rt.cfg.budget != nil {
		rt.cfg.budget.deposit()
	}
	var conn *connTrace
	if !rt.traced {
		conn = &connTrace{}
		conn.trace.GetConn = conn.getConn
		conn.trace.GotConn = conn.gotConn
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &conn.trace))
	}
	resp, err := rt.Next.RoundTrip(req)
	if err == nil && !rt.retryStatus(req, resp) {
		return resp, nil
	}
	if err != nil && roundtrip.IsConfigError(err) {
		// A middleware below was built with invalid options: no attempt
		// was made, and none would succeed.
		return nil, err
	}
	return rt.retry(req, conn, resp, err)
}

// retryStatus reports whether resp is a status WithStatusRetry retries.
func (rt *roundTripper) retryStatus(req *http.Request, resp *http.Response) bool {
	if !rt.cfg.status {
		return false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return true
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return rt.cfg.resendable(req)
	}
	return false
}

// retry takes over after the first attempt failed with err, or answered
// with a status to retry in resp. It is the slow path: the state it keeps is
// per request. Each round decides whether the attempt may be retried at all
// (mayRetry), how long to wait (the backoff, or a status's Retry-After),
// and whether the retry is admitted now, by Retry-After's bound, the
// deadline and then the budget (admit), in that order on every path. A
// retry is reported before its wait.
func (rt *roundTripper) retry(req *http.Request, conn *connTrace, resp *http.Response, err error) (*http.Response, error) {
	ctx := req.Context()
	e := &Error{Method: req.Method}
	rewindable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	shared := false    // whether a retry of this request already shared a token
	maybeSent := false // whether a copy sent may have reached the server
	for attempt := 1; ; attempt++ {
		e.Attempts = attempt
		d := Decision{Request: req, Attempt: attempt, Err: err}
		failedOn, known, unsent := failedOn(conn, err)
		var asked time.Duration // the status's Retry-After, if it has one
		hasAsked := false
		if err != nil {
			e.Causes = append(e.Causes, err)
			d.Class = rt.classify(err)
			if d.Class == MaybeSent && unsent {
				// The error alone cannot tell a reset TLS handshake
				// from a reset request; net/http's hooks can.
				d.Class = NotSent
			}
			e.Class = d.Class
			maybeSent = maybeSent || d.Class == MaybeSent
		} else {
			maybeSent = maybeSent || resp.StatusCode != http.StatusTooManyRequests
			d.StatusCode = resp.StatusCode
			asked, hasAsked = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			e.Causes = append(e.Causes, &StatusError{StatusCode: resp.StatusCode, RetryAfter: asked})
		}
		reason := rt.mayRetry(req, d, rewindable)
		if reason == 0 {
			d.Wait = rt.cfg.backoff(d.Attempt)
			if hasAsked {
				d.Wait = asked
			}
			reason = rt.admit(ctx, d, hasAsked, failedOn, known, &shared)
		}
		if reason != 0 {
			if err == nil {
				// A status no retry follows goes back to the caller.
				rt.observe(d, reason)
				return resp, nil
			}
			return nil, rt.stop(e, d, reason)
		}
		if resp != nil {
			drain(resp)
		}
		next, berr := rewind(req)
		if berr != nil {
			e.Causes = append(e.Causes, berr)
			return nil, rt.stop(e, d, ReasonBodyNotRewindable)
		}
		d.Retry = true
		rt.observe(d, 0)
		rt.log(req, d)
		if cerr := sleep(ctx, d.Wait); cerr != nil {
			if next != req {
				roundtrip.CloseRequestBody(next)
			}
			e.Causes = append(e.Causes, cerr)
			return nil, rt.stop(e, d, ctxReason(ctx))
		}
		resp, err = rt.Next.RoundTrip(next)
		if err == nil && !rt.retryStatus(req, resp) {
			if maybeSent {
				rt.maybeApplied(req, resp, attempt+1)
			}
			return resp, nil
		}
	}
}

// mayRetry returns why the attempt d may not be retried at all, or 0: the
// caller gave up, the failure is not one a retry can fix, the request may
// have reached the server and the resend rule refuses it, its body cannot
// be sent again, or no attempt is left.
func (rt *roundTripper) mayRetry(req *http.Request, d Decision, rewindable bool) Reason {
	if req.Context().Err() != nil {
		return ctxReason(req.Context())
	}
	if d.Err != nil {
		switch {
		case d.Class == NotRetryable:
			return ReasonNotRetryable
		case d.Class == MaybeSent && !rt.cfg.resendable(req):
			return ReasonNotIdempotent
		}
	}
	switch {
	case !rewindable:
		return ReasonBodyNotRewindable
	case d.Attempt >= rt.cfg.maxAttempts && !rt.untilDeadline(req, d):
		return ReasonAttempts
	}
	return 0
}

// untilDeadline reports whether the attempt d may be retried past
// WithMaxAttempts: its request was certainly not sent (a dial refused or
// unreachable, a TLS handshake reset or timed out, a stream refused or
// left unprocessed by a graceful GOAWAY), the request's context has a
// deadline, and retries are on. A server restarting behind its address
// refuses connections for seconds, and a load balancer resets those it
// sends to a dead replica until its health check marks it out; a caller
// who gave the request longer than that loses nothing by the wait. Past
// the bound, each retry takes a budget token (withdraw), so that a server
// down for long costs dials at the budget's rate, not at every request's.
func (rt *roundTripper) untilDeadline(req *http.Request, d Decision) bool {
	if rt.cfg.maxAttempts < 2 || d.Err == nil || d.Class != NotSent {
		return false
	}
	_, ok := req.Context().Deadline()
	return ok
}

// classify classifies err with the configured classifier, except that a
// failure of the caller's own request body is never retried, whatever a
// classifier from WithClassifier says: the connection did not fail.
func (rt *roundTripper) classify(err error) Class {
	if isBodyError(err) {
		return NotRetryable
	}
	return rt.cfg.classify(err)
}

// admit returns why the retry after d may not happen now, or 0: the
// status's Retry-After (asked) is longer than WithMaxRetryAfter allows,
// the wait would end past the context's deadline, or the budget refuses
// it. The budget comes last, so a retry that could not run takes no token.
func (rt *roundTripper) admit(ctx context.Context, d Decision, asked bool, failedOn roundtrip.ConnKey, known bool, shared *bool) Reason {
	if asked && d.Wait > rt.cfg.maxWait {
		return ReasonRetryAfter
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d.Wait {
		return ReasonDeadline
	}
	if !rt.withdraw(d, failedOn, known, shared) {
		return ReasonBudget
	}
	return 0
}

// withdraw asks the budget for the retry after d (see the package
// documentation, The retry budget): free if the request never reached a
// server (within WithMaxAttempts), one token shared with the connection's
// other requests if the connection was lost under it (once per request:
// its later retries pay their own), else one token.
func (rt *roundTripper) withdraw(d Decision, failedOn roundtrip.ConnKey, known bool, shared *bool) bool {
	b := rt.cfg.budget
	switch {
	case b == nil:
		return true
	case d.Err == nil:
		return b.withdraw()
	}
	switch c := budgetCause(d.Err); {
	case c == causeNoLoad && d.Class == NotSent:
		// Free within WithMaxAttempts; past it (untilDeadline), a token.
		return d.Attempt < rt.cfg.maxAttempts || b.withdraw()
	case c == causeConnection && known && !*shared:
		*shared = true
		return b.withdrawShared(failedOn)
	}
	return b.withdraw()
}

// sleep waits d, or until ctx is done; then it returns the context's cause.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// rewind returns the request to send again, with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("rewinding the request body: %w", err)
	}
	r := *req
	r.Body = body
	return &r, nil
}

// ctxReason is the reason to stop when ctx is done.
func ctxReason(ctx context.Context) Reason {
	if ctx.Err() == context.DeadlineExceeded {
		return ReasonDeadline
	}
	return ReasonCanceled
}

// maybeApplied marks resp, the answer of attempt, a copy of req sent
// again after an earlier one may have reached the server, when its status
// may be the earlier copy's doing; it tells the observer and logs it.
func (rt *roundTripper) maybeApplied(req *http.Request, resp *http.Response, attempt int) {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		// A read applies nothing.
		return
	}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed, http.StatusUnprocessableEntity:
	default:
		return
	}
	answered := resp.Request
	if answered == nil {
		answered = req
	}
	resp.Request = answered.WithContext(context.WithValue(answered.Context(), maybeAppliedKey{}, true))
	d := Decision{Request: req, Attempt: attempt, Class: NotRetryable, StatusCode: resp.StatusCode}
	rt.observe(d, ReasonMaybeApplied)
	rt.logf(req, "re-sent request refused; an earlier copy may have been applied", "attempt", attempt, "status", resp.StatusCode)
}

// stop ends retrying for reason: it records the reason in e, tells the
// observer and returns e.
func (rt *roundTripper) stop(e *Error, d Decision, reason Reason) *Error {
	e.Reason = reason
	rt.observe(d, reason)
	return e
}

// observe reports d to the observer: a retry when reason is 0, else the
// end of retrying for reason.
func (rt *roundTripper) observe(d Decision, reason Reason) {
	if rt.cfg.observer == nil {
		return
	}
	if reason != 0 {
		d.Reason, d.Retry, d.Wait = reason, false, 0
	}
	rt.cfg.observer(d)
}

func (rt *roundTripper) log(req *http.Request, d Decision) {
	kv := []any{"attempt", d.Attempt, "wait", d.Wait}
	if d.Err != nil {
		kv = append(kv, "class", d.Class.String(), "err", d.Err)
	} else {
		kv = append(kv, "status", d.StatusCode)
	}
	rt.logf(req, "retrying request", kv...)
}

// logf logs msg about req, with kv after the request's method, host and
// path, to the request's logger or the middleware's.
func (rt *roundTripper) logf(req *http.Request, msg string, kv ...any) {
	log, lerr := logr.FromContext(req.Context())
	if lerr != nil {
		log = rt.cfg.logger
	}
	v := log.V(rt.cfg.verbosity)
	if !v.Enabled() {
		return
	}
	path := ""
	if req.URL != nil {
		path = req.URL.Path
	}
	v.Info(msg, append([]any{"method", req.Method, "host", req.Host, "path", path}, kv...)...)
}

// drain reads a little of a discarded response body, so that its connection
// can be reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// failedOn returns the connection the attempt that ended with err was on,
// whether it is known, and whether the attempt's request was certainly
// never written (net/http looked for a connection and handed it none):
// from the error when a middleware below names its connection (pooltrace's,
// a roundtrip.ConnError), else from the request's own trace. A dial that
// failed has no connection.
func failedOn(conn *connTrace, err error) (key roundtrip.ConnKey, known, unsent bool) {
	c, asked := conn.take()
	var ce roundtrip.ConnError
	if errors.As(err, &ce) {
		key, known = ce.FailedConn()
		return key, known, ce.Unsent()
	}
	if c == nil {
		return roundtrip.ConnKey{}, false, err != nil && asked
	}
	key, known = roundtrip.KeyOf(c)
	return key, known, false
}

// connTrace learns which connection carried an attempt, so that the
// requests that failed with the same connection can share one retry token,
// and whether net/http handed the attempt one at all. net/http calls
// GetConn when it looks for a connection for a request and GotConn for
// every connection it hands the request, composed with any other trace in
// the context (client-go's); the last one is the connection the attempt
// failed on. Dials that fail never report a connection, and net/http
// writes a request only to a connection it handed over.
type connTrace struct {
	trace httptrace.ClientTrace
	mu    sync.Mutex
	asked bool
	conn  net.Conn
}

func (c *connTrace) getConn(string) {
	c.mu.Lock()
	c.asked = true
	c.mu.Unlock()
}

func (c *connTrace) gotConn(info httptrace.GotConnInfo) {
	c.mu.Lock()
	c.conn = info.Conn
	c.mu.Unlock()
}

// take returns the connection of the attempt that just ended, if there was
// one, and whether net/http looked for one, and forgets both for the next
// attempt.
func (c *connTrace) take() (net.Conn, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, asked := c.conn, c.asked
	c.conn, c.asked = nil, false
	return conn, asked
}

// markBody returns req with its body, and the bodies GetBody returns,
// marking the caller's read errors, and an end before ContentLength, as
// [*BodyError]: an attempt that fails because the caller's reader failed
// is not retried, and its error says so. req itself is not modified.
func markBody(req *http.Request) *http.Request {
	if req.Body == nil || req.Body == http.NoBody {
		return req
	}
	r := *req
	r.Body = &markedBody{rc: req.Body, length: req.ContentLength}
	if get := req.GetBody; get != nil {
		r.GetBody = func() (io.ReadCloser, error) {
			b, err := get()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return &markedBody{rc: b, length: req.ContentLength}, nil
		}
	}
	return &r
}

// markedBody is a request body whose failures are [*BodyError]s. The
// transport reads it from one goroutine at a time.
type markedBody struct {
	rc     io.ReadCloser
	length int64 // the request's ContentLength; not above 0 when unknown
	n      int64 // bytes read
}

func (b *markedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF && b.n < b.length:
		// net/http would fail the attempt with a message that reads like
		// a broken connection (HTTP/1.1), or send the short body and get
		// the stream reset (HTTP/2).
		err = &BodyError{Err: fmt.Errorf("ended after %d of its ContentLength %d bytes: %w", b.n, b.length, io.ErrUnexpectedEOF)}
	case err != nil && err != io.EOF:
		err = &BodyError{Err: err}
	}
	return n, err
}

func (b *markedBody) Close() error { return b.rc.Close() }

func isBodyError(err error) bool {
	var be *BodyError
	return errors.As(err, &be)
}
