package main

import (
	"context"
	"crypto/rand"
	"net/http"
)

// maxRequestID is the longest caller's X-Request-Id the gateway keeps;
// kube-apiserver records an Audit-ID as it is, so the gateway bounds what
// it passes on.
const maxRequestID = 64

type requestIDKey struct{}

// withRequestIDs serves h with each request's context carrying its request
// ID ([requestIDFrom]), set in the answer's X-Request-Id header too: the
// caller's X-Request-Id if [validRequestID], else a fresh one.
func withRequestIDs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// requestIDFrom returns the request ID ctx carries, if any.
func requestIDFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(requestIDKey{}).(string)
	return id, ok
}

// validRequestID reports whether id may be an Audit-ID and a log value as
// it is: 1 to 64 letters, digits, '-', '_', '.', ':' or '/'.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/':
		default:
			return false
		}
	}
	return true
}

// auditIDs is a client-go WrapperFunc: a request whose context carries a
// request ID ([withRequestIDs]) goes to the API server with it as its
// Audit-ID, which kube-apiserver records as it is. A nil next is
// http.DefaultTransport, as for http.Client.
func auditIDs(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &auditID{next: next}
}

type auditID struct{ next http.RoundTripper }

func (a *auditID) RoundTrip(req *http.Request) (*http.Response, error) {
	id, ok := requestIDFrom(req.Context())
	if !ok {
		return a.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Audit-ID", id)
	return a.next.RoundTrip(r)
}

// WrappedRoundTripper returns the RoundTripper beneath, as client-go's
// wrappers do.
func (a *auditID) WrappedRoundTripper() http.RoundTripper { return a.next }

// CloseIdleConnections closes the idle connections of the RoundTripper
// beneath.
func (a *auditID) CloseIdleConnections() {
	if c, ok := a.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
