package retry

import (
	"net/http"
	"strings"

	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/transport"
)

// NoReplay returns a middleware that holds net/http's own re-sends to the
// resend rule opts set ([WithResendable]; by default [IsIdempotent]).
// net/http's Transport re-sends by itself a write that carries an
// Idempotency-Key or X-Idempotency-Key header when a reused connection
// fails after the write was sent. [New] stops that when the rule refuses
// the write, but only for the headers the request carries when it reaches
// New: a header set below it, by an attempt middleware or a wrapper
// between New and the base transport, reaches net/http as it was set, and
// net/http sends a second copy that the rule refuses. Put NoReplay right
// above the base transport, below every middleware that may set one of
// those headers, with New's options: stack.New puts it under timeout;
// kubeadapter.NoReplay is it with Kubernetes' rule, for a config's own
// wrappers.
//
// A write with one of those headers that the rule refuses goes on as a
// copy that carries them under their lower-case names, as New passes it
// on: the same headers to the server, but net/http, which looks up the
// canonical names only, does not re-send it. Unlike New, NoReplay holds
// upgrade requests to the rule too. Other requests pass through as they
// are, with no allocation and no call of the rule. The rule runs on the
// request's goroutine and must not consume the request's body. The
// caller's request is not modified.
//
// Only the resend rule of opts is used; the others are checked as New
// checks them. Invalid options do not panic: every request fails, without
// being sent, with the error New's requests would fail with. The
// RoundTrippers are safe for concurrent use.
func NoReplay(opts ...Option) transport.Middleware {
	c := newConfig(opts)
	return func(next http.RoundTripper) http.RoundTripper {
		return &noReplay{Wrapped: roundtrip.Wrap(next), resendable: c.resendable, err: c.err}
	}
}

type noReplay struct {
	roundtrip.Wrapped
	resendable func(*http.Request) bool
	err        error
}

func (g *noReplay) RoundTrip(req *http.Request) (*http.Response, error) {
	if g.err != nil {
		roundtrip.CloseRequestBody(req)
		return nil, g.err
	}
	return g.Next.RoundTrip(unreplayable(req, g.resendable))
}

// unreplayable returns req, or a copy of it that net/http will not re-send
// on its own when resendable, the resend rule, refuses it. net/http's
// Transport re-sends a request that failed on a reused connection after it
// was written when the request is replayable (net/http's
// Request.isReplayable): a GET, HEAD, OPTIONS or TRACE, or any request
// whose header map has the key Idempotency-Key or X-Idempotency-Key and
// whose body can be rewound. The first are reads; for the others the
// header would let net/http, below the retry layer, send a second copy of
// a write that the rule refuses (kubeadapter's rule ignores the header, as
// the API server does). The copy carries those headers under their
// lower-case keys: the same headers to the server (header names are
// case-insensitive, and HTTP/2 sends them lower case anyway), but net/http
// looks up the canonical key only.
// Its GetBody stays, so that net/http still re-sends a copy of which it
// wrote nothing. The rule reads the body of such a write here, up front;
// the header is rare, and other requests cost two map look-ups.
//
// The retry layer and [NoReplay] both call it, so that one function holds
// net/http's re-sends to the rule wherever the header was set.
func unreplayable(req *http.Request, resendable func(*http.Request) bool) *http.Request {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return req
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	if !key && !xkey || resendable(req) {
		return req
	}
	r := *req
	r.Header = req.Header.Clone()
	for _, k := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := r.Header[k]; ok {
			// Header.Write sends keys in sorted order, the canonical one
			// first: keep the values in that order.
			lower := strings.ToLower(k)
			r.Header[lower] = append(v, r.Header[lower]...)
			delete(r.Header, k)
		}
	}
	return &r
}
