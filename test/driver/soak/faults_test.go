package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPlan(t *testing.T) {
	rates := map[string]float64{FaultResetBefore: 60, FaultBlackHole: 0.1, FaultStall: 0}
	p := plan(7, time.Minute, rates, true)
	assert.Equal(t, p, plan(7, time.Minute, rates, true), "a seed replays its plan")
	assert.NotEqual(t, p, plan(8, time.Minute, rates, true))
	count := map[string]int{}
	for i, f := range p {
		count[f.Fault]++
		assert.Less(t, f.At, time.Minute)
		if i > 0 {
			assert.LessOrEqual(t, p[i-1].At, f.At, "in order")
		}
	}
	assert.InDelta(t, 60, count[FaultResetBefore], 25, "about its rate")
	assert.Equal(t, 1, count[FaultBlackHole], "a rare fault still comes once")
	assert.Zero(t, count[FaultStall])
	assert.Equal(t, 1, count[FaultRestart])
	assert.Contains(t, p, planned{At: 30 * time.Second, Fault: FaultRestart}, "in the middle")
}
