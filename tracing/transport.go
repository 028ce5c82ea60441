package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/trace"
)

type callRT struct {
	wrapped
	t *Tracer
}

func (rt *callRT) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	attrs := rt.t.requestAttributes(req)
	_, span := rt.t.tracer.Start(parent, spanName(req.Method), internalKind, trace.WithAttributes(attrs...))
	cs := &callSpan{Span: span, request: attrs}
	resp, err := rt.next.RoundTrip(req.WithContext(trace.ContextWithSpan(parent, cs)))
	if err != nil {
		cs.end(0, err)
		return nil, err
	}
	if as, ok := resp.Body.(*attemptSpan); ok && !as.ended.Load() {
		// The attempt's span ends with the body, and the call's with it.
		as.call = cs
		return resp, nil
	}
	cs.end(resp.StatusCode, nil)
	return resp, nil
}

type attemptRT struct {
	wrapped
	t *Tracer
}

func (rt *attemptRT) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	as := &attemptSpan{n: 1}
	if cs, ok := trace.SpanFromContext(parent).(*callSpan); ok {
		as.n, as.request = int(cs.attempts.Add(1)), cs.request
	} else {
		as.request = rt.t.requestAttributes(req)
	}
	// The request's attributes are recorded when the span ends, with the
	// rest, in one slice: the sampler decides on the call's span, which has
	// them at its start, and the attempts follow it (sdktrace.ParentBased,
	// the SDK's default).
	_, as.Span = rt.t.tracer.Start(parent, spanName(req.Method), clientKind)
	ctx := trace.ContextWithSpan(parent, as)
	out := req.WithContext(ctx)
	if rt.t.propagator != nil {
		// The caller's request is never modified: the headers are a copy.
		out.Header = req.Header.Clone()
		if out.Header == nil {
			out.Header = http.Header{}
		}
		rt.t.propagator.Inject(ctx, headerCarrier(out.Header))
	}
	resp, err := rt.next.RoundTrip(out)
	if err != nil {
		as.end(0, err)
		return nil, err
	}
	as.status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		// An upgraded connection belongs to the caller: the span ends at
		// the headers, and the body is not wrapped.
		as.end(resp.StatusCode, nil)
		return resp, nil
	}
	as.body = resp.Body
	resp.Body = as
	return resp, nil
}

// failing fails every request with err, without sending it.
type failing struct {
	wrapped
	err error
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return nil, f.err
}

// wrapped is embedded by the RoundTrippers of this package: it gives them
// WrappedRoundTripper (apimachinery's utilnet.RoundTripperWrapper) and
// forwards CloseIdleConnections; the pool belongs to the base transport.
type wrapped struct {
	next http.RoundTripper
}

func (w wrapped) WrappedRoundTripper() http.RoundTripper { return w.next }

func (w wrapped) CloseIdleConnections() {
	if c, ok := w.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
