package retry

import (
	"sync"
	"time"
)

// budget is a token bucket in the style of Finagle's RetryBudget: each
// request deposits ratio tokens, time deposits floor tokens per second, and
// each retry withdraws one. The balance is capped at ten seconds of floor or
// ten retries, whichever is more, so an idle period does not bank a storm.
type budget struct {
	ratio, floor, cap float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newBudget(ratio, floor float64) *budget {
	return &budget{ratio: ratio, floor: floor, cap: max(10*floor, 10), tokens: floor, last: time.Now()}
}

func (b *budget) refill(now time.Time) {
	if b.floor > 0 {
		b.tokens += b.floor * now.Sub(b.last).Seconds()
	}
	b.last = now
	b.tokens = min(b.tokens, b.cap)
}

func (b *budget) deposit() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.cap)
	b.mu.Unlock()
}

func (b *budget) withdraw() bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}
