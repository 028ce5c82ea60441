// Package stack is kubewire's middleware in its one right order, for a
// plain net/http client; client-go users get the same stack from
// kubeadapter.Apply.
//
//	base, err := transport.New()
//	if err != nil {
//		return err
//	}
//	client := &http.Client{Transport: stack.New(10 * time.Second)(base)}
//
// The stack is, outermost first (as in transport.Chain), retry, then
// pooltrace, then timeout, then retry's guard against net/http's own
// re-sends (retry.NoReplay), right above the base transport:
//
//   - retry is outermost so that every attempt it makes goes through
//     pooltrace and timeout: each attempt is traced on the connection it
//     got, and gets a deadline of its own. The caller's context deadline
//     bounds the whole call, attempts and backoff together.
//   - pooltrace is below retry and above timeout. Below retry, its error
//     tells retry which connection an attempt failed on, so retry adds no
//     trace hook of its own. Above timeout, it wraps timeout's error, so a
//     timeout that ran out says which connection it died on.
//   - timeout is the innermost of the three, so the deadline starts when
//     the attempt is handed to the transport and nothing above it (a
//     backoff, an earlier attempt) counts against it.
//   - retry.NoReplay, built with retry's options, is below them all.
//     net/http re-sends by itself a write that carries an Idempotency-Key
//     or X-Idempotency-Key header when a reused connection fails after the
//     write was sent; retry holds that to its resend rule only for the
//     headers the request has when it reaches retry. The guard holds it
//     for those an attempt middleware sets below retry. A request without
//     those headers passes it at no cost.
//
// kubeadapter and metrics build their stacks with [New], so this package
// is the one place the order is written.
package stack
