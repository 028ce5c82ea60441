package timeout

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Phase says where a request was when its timeout ran out.
type Phase int

const (
	// PhaseHeaders: the request was being sent or its response headers had
	// not arrived.
	PhaseHeaders Phase = iota + 1
	// PhaseBody: the response body was being read.
	PhaseBody
	// PhaseStalled: a long-running response body made no progress for the
	// stall timeout.
	PhaseStalled
)

func (p Phase) String() string {
	switch p {
	case PhaseHeaders:
		return "waiting for response headers"
	case PhaseBody:
		return "reading the response body"
	case PhaseStalled:
		return "streaming the response body with no progress"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// Error is returned when a request's timeout runs out. errors.Is(err,
// context.DeadlineExceeded) is true and Timeout reports true.
type Error struct {
	// Limit is the timeout that ran out: the request's, or the stall
	// timeout for PhaseStalled. It is the same quantity as [Exceeded.Limit].
	Limit time.Duration
	// Elapsed is the time from RoundTrip to the moment the timeout ran out.
	Elapsed time.Duration
	// Phase says what the request was doing.
	Phase Phase
	// Err is the error the transport returned as it was cut off, when it
	// adds anything to the cancellation itself; it may be nil.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Phase == PhaseStalled {
		fmt.Fprintf(&b, "timeout: no progress for %v after %v %s", e.Limit, e.Elapsed.Round(time.Millisecond), "while streaming the response body")
	} else {
		fmt.Fprintf(&b, "timeout: request timeout of %v exceeded after %v %s", e.Limit, e.Elapsed.Round(time.Millisecond), e.Phase)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the transport's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is context.DeadlineExceeded.
func (e *Error) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true: Error is a timeout in the sense of net.Error.
func (e *Error) Timeout() bool { return true }

// Temporary reports true, as context.DeadlineExceeded does. It exists so
// that *Error satisfies net.Error.
func (e *Error) Temporary() bool { return true }
