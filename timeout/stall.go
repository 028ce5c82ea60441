package timeout

import "time"

// The stall watchdog of long-running requests ([WithStallTimeout]): once
// their headers have arrived the request's timeout no longer applies, and
// the timer of the call measures silence instead. Every read that delivers bytes
// records the time (call.progress); when the timer fires, a stream that
// delivered something within the stall timeout has the timer set again for
// the rest of it, and a silent one is cut with PhaseStalled.

// streaming moves a long-running request past its headers: the timeout
// no longer applies, the stall watchdog does if it is on.
func (c *call) streaming() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if c.stall <= 0 {
		c.timer.Stop()
		c.phase = PhaseBody
		return
	}
	c.phase = PhaseStalled
	c.progress.Store(int64(time.Since(c.start)))
	c.timer.Reset(c.stall)
}

// rearm sets the timer again for the rest of the stall timeout if the
// stream delivered bytes within it, and reports whether it did. c.mu is
// held.
func (c *call) rearm(elapsed time.Duration) bool {
	quiet := elapsed - time.Duration(c.progress.Load())
	if quiet >= c.stall {
		return false
	}
	c.timer.Reset(c.stall - quiet)
	return true
}
