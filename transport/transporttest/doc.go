// Package transporttest checks HTTP middleware against net/http's
// RoundTripper contract, and provides the loopback servers and the fault
// proxy such tests need, as net/http/httptest does for handlers.
//
// # The contract suite
//
// [TestMiddleware] is a conformance kit in the manner of
// golang.org/x/net/nettest.TestConn and testing/fstest.TestFS: a test
// hands it a middleware, a func(http.RoundTripper) http.RoundTripper, and
// it runs every property as a subtest over HTTP/1.1 and HTTP/2:
//
//	func TestContract(t *testing.T) {
//		transporttest.TestMiddleware(t, mymiddleware.New())
//	}
//
// Any middleware passed to stack.WithCallMiddleware or
// stack.WithAttemptMiddleware, to transport.Chain or to client-go's
// rest.Config.Wrap should pass it, alone and in its place in the stack:
//
//	transporttest.TestMiddleware(t, stack.New(30*time.Second,
//		stack.WithAttemptMiddleware(mymiddleware.New())))
//
// (a timeout far above what the suite's requests take: its concurrent
// case queues 32 of them on one server.) Each property is there because a
// caller above the middleware depends on it:
//
//   - The request is not modified: the caller owns it and may use it after
//     RoundTrip returns, as http.Client does when it copies its headers onto
//     a redirect (net/http's RoundTripper doc; change a clone, req.Clone).
//   - The request body is closed on every path, errors included, or each
//     failed request leaks what the body holds.
//   - A response or an error, never both; a non-2xx status is a response:
//     client-go reads the Status object in its body, and retries a 429, or
//     a 5xx with Retry-After, itself.
//   - A 101 response keeps its body an io.ReadWriteCloser: exec, attach
//     and port-forward write through it.
//   - WrappedRoundTripper and CloseIdleConnections reach the RoundTripper
//     beneath (apimachinery's utilnet.RoundTripperWrapper), so that closing
//     a client's idle connections reaches the pool; the middleware never
//     empties the pool itself.
//   - A middleware applied to nil sends through http.DefaultTransport, as
//     http.Client does, or, being the identity, hands the nil back.
//   - All of it holds under concurrent use, with cancellations, bodies
//     closed half read and answers a middleware may retry (429, 500, 503),
//     and no response goes to the wrong request; every response body the
//     pool hands out is closed, those the middleware does not pass on
//     included, or each holds a connection that never returns to the pool.
//
// [TestConfigError] checks how a middleware built with invalid options
// fails: every request, unsent, with a *transport.ConfigError.
//
// # Servers and faults
//
// [NewServers] starts a handler over HTTP/1.1 and HTTP/2 with a base
// transport for each, as [Servers]: a test of one protocol names its
// field, a test of every protocol ranges over [Servers.All]:
//
//	for _, srv := range transporttest.NewServers(t, h).All() {
//		t.Run(srv.Name, func(t *testing.T) { ... mw(srv.Base) ... srv.URL ... })
//	}
//
// [RefusedURL], [NewUpgradeServer] and [Upgrade] cover a dial that fails
// and an upgraded connection. A [Proxy] sits between a client and a
// server on loopback TCP and injects faults below TLS and HTTP ([Fault]):
// resets before or after the server answered, a close as the client
// reuses an idle connection, a stall, a peer that stops answering, set for
// every connection or for those open now ([Proxy.SetFaultExisting]),
// until cleared or once ([Proxy.SetFaultExistingOnce]). [BehindProxy]
// starts a handler behind one. A test that
// means "the peer stopped answering" uses [Hold], which holds bytes and
// delivers them later: dropping bytes would corrupt a TLS or HTTP/2 stream
// at a moment the test does not choose.
//
// # Without a network
//
// An [Answerer] answers every request at once, with no network below it
// and a real loopback connection for the request's trace: under a
// middleware, what is left is the middleware's own cost.
// [AllocsPerRequest] counts what one request through it allocates:
//
//	a := transporttest.NewAnswerer(t)
//	extra := transporttest.AllocsPerRequest(t, mymiddleware.New()(a), false) -
//		transporttest.AllocsPerRequest(t, a, false)
//
// Everything here listens on 127.0.0.1 only. What a function given a
// testing.TB starts stops when that test ends, upgraded connections
// included; a Proxy from [NewProxy] stops when closed. A middleware
// that holds requests past their context's cancellation fails
// TestMiddleware's Concurrent case with the requests it holds, and its
// goroutines are left for the caller's goleak to report; one that never
// returns at all stops the suite at go test's -timeout, as any hung test
// does. The functions are safe for concurrent use by parallel tests.
package transporttest
