package kubeadapter

import (
	"errors"
	"strings"
	"syscall"

	"github.com/kubewire/kubewire/retry"
)

// Error is the error client-go receives for a request the stack retried
// and gave up on, or did not retry because the retry budget refused, so
// that client-go does not retry it again ("One retry layer" in the package
// documentation). It says what the [retry.Error] inside says in words that
// apimachinery's IsConnectionReset, IsProbableEOF and IsHTTP2ConnectionLost
// (client-go's rest/request.go) do not match, and does not let errors.As
// reach a syscall.Errno, which IsConnectionReset looks for.
//
// Everything stays reachable:
//
//   - errors.As(err, &re) with re a *retry.Error gives the retry error, whose
//     Causes hold every attempt's original error (a *pooltrace.Error with
//     the connection, a *timeout.Error, the net/http error).
//   - errors.As reaches every type among the causes except syscall.Errno.
//   - errors.Is sees every cause: errors.Is(err, syscall.ECONNRESET),
//     errors.Is(err, io.EOF) and errors.Is(err, context.DeadlineExceeded) hold
//     as they do for the retry error.
//
// Requests the stack does not retry (long-running ones and upgrades) fail
// with their own error, and client-go retries them as before; so do
// requests that failed on their only attempt for another reason, for
// example under WithRetryOptions(retry.WithMaxAttempts(1)), which hands
// retries back to client-go.
//
// A call middleware (stack.WithCallMiddleware) that wraps the retry error,
// as fmt.Errorf("...: %w", err) does, keeps its words and its types: the
// Error holds the whole chain the stack returned, and says and reaches
// what it does, with the same exceptions. So does one that formats the
// error (%v, %s) or replaces it, even with one of the causes: the stack
// notes the retry error below every call middleware, and the Error
// carries it in Retry while saying, in neutral words, what the middleware
// returned.
//
// The text differs from the stack's error only in those words: "connection
// reset by peer" reads "connection reset by the peer", "use of closed
// network connection" reads "closed network connection used", and so on.
type Error struct {
	// Retry is the error of the retry middleware; never nil in an Error the
	// stack returns.
	Retry *retry.Error
	// err is what the stack returned: Retry, or a call middleware's error
	// that wraps, formats or replaces it. Nil in an Error made by hand, which then stands for
	// Retry alone.
	err error
}

// chain returns the error the stack returned.
func (e *Error) chain() error {
	if e.err != nil {
		return e.err
	}
	return e.Retry
}

func (e *Error) Error() string { return neutral(e.chain().Error()) }

// Is reports whether any error in the chain is target.
func (e *Error) Is(target error) bool {
	// A call middleware's formatted or replaced error no longer holds the
	// retry error: its causes are still searched.
	return errors.Is(e.chain(), target) || e.err != nil && errors.Is(e.Retry, target)
}

// As finds the retry error, or an error in the chain of the target's type
// other than a syscall.Errno.
func (e *Error) As(target any) bool {
	switch t := target.(type) {
	case **retry.Error:
		*t = e.Retry
		return true
	case *syscall.Errno:
		return false
	}
	return errors.As(e.chain(), target) || e.err != nil && errors.As(e.Retry, target)
}

// Timeout reports whether the retry error is a timeout.
func (e *Error) Timeout() bool { return e.Retry.Timeout() }

// Temporary reports false; it exists so that *Error satisfies net.Error.
func (e *Error) Temporary() bool { return false }

// phrases maps what apimachinery's checks look for in an error's text
// (k8s.io/apimachinery/pkg/util/net: IsProbableEOF and
// IsHTTP2ConnectionLost) to words that say the same.
var phrases = strings.NewReplacer(
	"connection reset by peer", "connection reset by the peer",
	"use of closed network connection", "closed network connection used",
	"Use of closed network connection", "closed network connection used",
	"http2: client connection lost", "http2: the client lost the connection",
	"http2: server sent GOAWAY and closed the connection", "http2: the server sent GOAWAY and closed the connection",
	"http: can't write HTTP request on broken connection", "http: cannot write the HTTP request on a broken connection",
)

func neutral(msg string) string { return phrases.Replace(msg) }
