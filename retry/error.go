package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Reason says why retrying stopped.
type Reason int

const (
	// ReasonNotRetryable: the error is not one a retry can fix.
	ReasonNotRetryable Reason = iota + 1
	// ReasonNotIdempotent: the request may have reached the server, and the
	// resend rule ([WithResendable]) does not allow a second copy, so it
	// was not re-sent.
	ReasonNotIdempotent
	// ReasonBodyNotRewindable: the request body cannot be sent again.
	ReasonBodyNotRewindable
	// ReasonAttempts: every attempt failed.
	ReasonAttempts
	// ReasonDeadline: the context's deadline passed, or would pass before
	// the next attempt could start.
	ReasonDeadline
	// ReasonCanceled: the caller cancelled the request.
	ReasonCanceled
	// ReasonBudget: the retry budget is spent; the server is failing many
	// requests.
	ReasonBudget
	// ReasonRetryAfter: the status asked for a wait longer than
	// [WithMaxRetryAfter] allows; it went back to the caller.
	ReasonRetryAfter
	// ReasonMaybeApplied: a copy re-sent after an earlier one may have
	// reached the server was answered 404, 409, 412 or 422, which the
	// earlier copy may have caused by being applied. The answer went back
	// to the caller ([MaybeApplied]).
	ReasonMaybeApplied
)

func (r Reason) String() string {
	switch r {
	case ReasonNotRetryable:
		return "not retryable"
	case ReasonNotIdempotent:
		return "not retried: the request may have reached the server, and a second copy may not be harmless (the resend rule, retry.WithResendable, refused it; under kubeadapter a precondition such as metadata.resourceVersion makes a write re-sendable)"
	case ReasonBodyNotRewindable:
		return "not retried: the request body cannot be rewound (no GetBody)"
	case ReasonAttempts:
		return "attempts exhausted"
	case ReasonDeadline:
		return "deadline: no time left for another attempt"
	case ReasonCanceled:
		return "canceled"
	case ReasonBudget:
		return "retry budget exhausted"
	case ReasonRetryAfter:
		return "not retried: Retry-After is longer than WithMaxRetryAfter allows"
	case ReasonMaybeApplied:
		return "re-sent after an earlier copy may have reached the server, and refused: the earlier copy may have been applied"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Error is the error of a request the middleware gave up on.
type Error struct {
	Method string
	// Attempts is how many attempts were sent.
	Attempts int
	Reason   Reason
	// Class is the classification of the last error.
	Class Class
	// Causes holds every attempt's error, in order (a [*StatusError] for an
	// attempt answered with a status to retry), and the context's error if
	// it ended a wait.
	Causes []error
}

func (e *Error) last() error {
	if len(e.Causes) == 0 {
		return nil
	}
	return e.Causes[len(e.Causes)-1]
}

func (e *Error) Error() string {
	var b strings.Builder
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	fmt.Fprintf(&b, "retry: %s failed after %d attempt%s (%s)", e.Method, e.Attempts, s, e.Reason)
	if last := e.last(); last != nil {
		b.WriteString(": ")
		b.WriteString(last.Error())
	}
	if earlier := e.Causes[:max(len(e.Causes)-1, 0)]; len(earlier) > 0 {
		b.WriteString(" [earlier:")
		for i, c := range earlier {
			// A request that reached no server is retried until its
			// deadline: the message names the first and the last
			// earlier attempts, not hundreds of refused dials.
			if n := len(earlier); n > 2*shownEarlier && i >= shownEarlier && i < n-shownEarlier {
				if i == shownEarlier {
					fmt.Fprintf(&b, " attempts %d to %d left out;", i+1, n-shownEarlier)
				}
				continue
			}
			fmt.Fprintf(&b, " attempt %d: %v;", i+1, c)
		}
		b.WriteString("]")
	}
	return b.String()
}

// shownEarlier is how many of the first and of the last earlier attempts
// an [Error]'s message names; [Error.Unwrap] returns every one.
const shownEarlier = 2

// Unwrap returns every cause, so errors.Is and errors.As search them all.
func (e *Error) Unwrap() []error { return e.Causes }

// Is reports whether target is context.DeadlineExceeded and retrying stopped
// for the deadline.
func (e *Error) Is(target error) bool {
	return target == context.DeadlineExceeded && e.Reason == ReasonDeadline
}

// Timeout reports whether retrying stopped for the deadline or the last
// attempt timed out.
func (e *Error) Timeout() bool {
	if e.Reason == ReasonDeadline {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(e.last(), &t) && t.Timeout()
}

// Temporary reports false; it exists so that *Error satisfies net.Error.
func (e *Error) Temporary() bool { return false }

// StatusError is the cause, in [Error], of an attempt that answered with a
// status [WithStatusRetry] retries: it keeps what the server said when a
// later attempt, or the wait before it, fails.
type StatusError struct {
	StatusCode int
	// RetryAfter is the wait the server asked for, zero when it asked
	// for none.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(", Retry-After %v", e.RetryAfter)
	}
	return s
}

// BodyError is the error of an attempt whose request body, the caller's
// reader, failed while it was being sent. The connection did not fail, so
// it is never retried.
type BodyError struct {
	Err error
}

func (e *BodyError) Error() string { return "request body: " + e.Err.Error() }

func (e *BodyError) Unwrap() error { return e.Err }
