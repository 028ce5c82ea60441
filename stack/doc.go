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
// pooltrace, then timeout, right above the base transport:
//
//   - retry is outermost so that every attempt it makes goes through
//     pooltrace and timeout: each attempt is traced on the connection it
//     got, and gets a deadline of its own. The caller's context deadline
//     bounds the whole call, attempts and backoff together.
//   - pooltrace is below retry and above timeout. Below retry, its error
//     tells retry which connection an attempt failed on, so retry adds no
//     trace hook of its own. Above timeout, it wraps timeout's error, so a
//     timeout that ran out says which connection it died on.
//   - timeout is innermost, so the deadline starts when the attempt is
//     handed to the transport and nothing above it (a backoff, an earlier
//     attempt) counts against it.
//
// kubeadapter and metrics build their stacks with [New], so this package
// is the one place the order is written.
package stack
