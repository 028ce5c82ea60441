package retry

import (
	"net/http"
	"time"
)

// Decision is what the middleware decided after a failed attempt: to retry
// after Wait, or to stop for Reason. An attempt fails with a transport
// error (Err) or, under [WithStatusRetry], with a status to retry
// (StatusCode).
type Decision struct {
	// Request is the request the middleware sends: the caller's, with a
	// context of its own. Observers must not modify it or read its body.
	Request *http.Request
	// Attempt is the attempt that just failed, 1 for the first.
	Attempt int
	// Err is the attempt's error, nil when it answered with StatusCode.
	Err error
	// Class classifies Err; NotRetryable when Err is nil.
	Class Class
	// StatusCode is the status the attempt answered with, zero when Err is
	// set.
	StatusCode int
	// Retry reports that another attempt was decided, after Wait. It is
	// reported before the wait; a caller that gives up during the wait
	// ends it, and a decision with ReasonCanceled or ReasonDeadline
	// follows.
	Retry bool
	// Wait is the wait before the next attempt; zero when Retry is false.
	Wait time.Duration
	// Reason says why retrying stopped, when Retry is false. A status
	// response given back because no attempt is left is ReasonAttempts; one
	// given back because the wait would pass the deadline, ReasonDeadline;
	// because the budget refused, ReasonBudget; because its Retry-After
	// is longer than WithMaxRetryAfter allows, ReasonRetryAfter.
	Reason Reason
}
