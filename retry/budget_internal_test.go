package retry

import (
	"math"
	"testing"
	"time"
)

// TestBudgetClockNeverRunsBack: a caller reads the clock before it takes
// the lock, so a refill can see a time before the last one. That must add
// nothing and take nothing. A negative elapsed time once took tokens away
// and, with a huge floor, turned an infinite balance into NaN (Inf + -Inf),
// after which every retry was refused.
func TestBudgetClockNeverRunsBack(t *testing.T) {
	for _, floor := range []float64{10, math.MaxFloat64} {
		b := newBudget(0.2, floor)
		now := time.Now()
		b.refill(now.Add(2 * time.Second))
		before := b.tokens
		b.refill(now)
		if b.tokens != before {
			t.Errorf("floor %v: a refill from the past moved the balance from %v to %v", floor, before, b.tokens)
		}
		if !b.last.Equal(now.Add(2 * time.Second)) {
			t.Errorf("floor %v: the budget's clock ran back to %v", floor, b.last)
		}
		if !b.withdraw() {
			t.Errorf("floor %v: the budget refused a retry with a balance of %v", floor, b.tokens)
		}
	}
}
