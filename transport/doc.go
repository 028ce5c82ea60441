// Package transport is the floor of kubewire: the middleware shape every
// other package uses, a way to chain middleware, and a pooled base
// transport with HTTP/2 health checks set per transport.
//
// # Middleware
//
// A [Middleware] has the same underlying type as client-go's
// transport.WrapperFunc, so a kubewire middleware can be passed to
// rest.Config.Wrap unchanged. [Chain] composes middleware with the first
// argument outermost: Chain(a, b)(base) sends a request through a, then b,
// then base. That is the reverse of client-go's transport.Wrappers, where the
// last wrapper ends up outermost.
//
// Every RoundTripper built by a kubewire middleware implements
// WrappedRoundTripper (apimachinery's utilnet.RoundTripperWrapper), so
// utilnet.CloseIdleConnectionsFor can walk through it, and forwards
// CloseIdleConnections to the RoundTripper it wraps. Middleware observes the
// connection pool; it never empties it.
//
// # Base transport
//
// [New] returns an *http.Transport built on go-cleanhttp's pooled transport:
// keep-alive connections, HTTP/2 over TLS through net/http's own HTTP/2
// (http.Transport.Protocols and http.Transport.HTTP2, the same on Go 1.26
// and 1.27) with a read-idle health check (a PING after [WithHTTP2ReadIdleTimeout] of
// silence, the connection closed if no answer within [WithHTTP2PingTimeout]),
// and an idle-connection timeout below common load-balancer idle limits.
// It sets no read deadline on connections: per-request deadlines belong to
// the timeout package.
package transport
