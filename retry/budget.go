package retry

import (
	"sync"
	"time"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// eventWindow is how long a connection's failure stays one event. Every
// stream on a dead connection fails at once (the connection's reader fails
// them all); the window only has to cover the time their goroutines take to
// reach the budget on a loaded machine. A longer window adds no retries: a
// dead connection carries no new requests, so an event's members are the
// requests that were in flight on it.
const eventWindow = 10 * time.Second

// budget is a token bucket in the style of Finagle's RetryBudget: each
// request deposits ratio tokens, time deposits floor tokens per second, and
// each retry withdraws one. The balance is capped at ten seconds of floor or
// ten retries, whichever is more, so an idle period does not bank a storm.
//
// Failures that share a cause share a token: the first request to fail
// with a lost connection withdraws one token and opens an event for that
// connection; the other requests that were on it join the event for free.
// Events are touched only on the failure path, under the same lock.
type budget struct {
	ratio, floor, cap float64

	mu        sync.Mutex
	tokens    float64
	last      time.Time
	events    map[roundtrip.ConnKey]time.Time // open events: when each ends
	sweepAt   time.Time
	withdrawn int // tokens given out, for tests
}

func newBudget(ratio, floor float64) *budget {
	return &budget{ratio: ratio, floor: floor, cap: max(10*floor, 10), tokens: floor, last: time.Now()}
}

// refill adds the floor's tokens for the time since the last refill. A
// caller reads the clock before it takes the lock, so now can be before
// the last refill: that adds nothing, and the clock does not run back.
func (b *budget) refill(now time.Time) {
	elapsed := now.Sub(b.last)
	if elapsed <= 0 {
		return
	}
	if b.floor > 0 {
		b.tokens += b.floor * elapsed.Seconds()
	}
	b.last = now
	b.tokens = min(b.tokens, b.cap)
}

func (b *budget) deposit() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.cap)
	b.mu.Unlock()
}

// withdraw takes one token for a retry.
func (b *budget) withdraw() bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeLocked(now)
}

// withdrawShared admits a retry after the connection k was lost: the first
// request to fail on k takes a token and opens the event, the others share
// it while the event is open.
func (b *budget) withdrawShared(k roundtrip.ConnKey) bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if end, ok := b.events[k]; ok && now.Before(end) {
		return true
	}
	if !b.takeLocked(now) {
		return false
	}
	if b.events == nil {
		b.events = map[roundtrip.ConnKey]time.Time{}
	}
	if now.After(b.sweepAt) {
		// Every event ends eventWindow after it opened, so the map holds
		// at most the events of two windows: no more than the tokens given
		// out in that time.
		for key, end := range b.events {
			if !now.Before(end) {
				delete(b.events, key)
			}
		}
		b.sweepAt = now.Add(eventWindow)
	}
	b.events[k] = now.Add(eventWindow)
	return true
}

func (b *budget) takeLocked(now time.Time) bool {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		b.withdrawn++
		return true
	}
	return false
}
