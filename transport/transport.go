package transport

import "net/http"

// Middleware wraps a RoundTripper in another. It has the same underlying
// type as client-go's transport.WrapperFunc.
type Middleware func(http.RoundTripper) http.RoundTripper

// Chain returns a Middleware that applies ms with the first one outermost:
// a request passes through ms[0] first and reaches the wrapped RoundTripper
// last. Nil entries are skipped. This is the reverse of client-go's
// transport.Wrappers, whose last argument ends up outermost.
func Chain(ms ...Middleware) Middleware {
	return func(rt http.RoundTripper) http.RoundTripper {
		for i := len(ms) - 1; i >= 0; i-- {
			if ms[i] != nil {
				rt = ms[i](rt)
			}
		}
		return rt
	}
}
