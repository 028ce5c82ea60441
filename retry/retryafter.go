package retry

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter caps a Retry-After value; the deadline caps it further.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter parses a Retry-After header value: a number of seconds or
// an HTTP date, relative to now. A date in the past is a wait of zero.
// Values above a day are capped at a day. It reports false for an empty or
// malformed value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return maxRetryAfter, true
			}
			return 0, false
		}
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > maxRetryAfter:
		return maxRetryAfter, true
	}
	return d, true
}
