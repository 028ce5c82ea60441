// Package internal is how package reconciler reaches the parts of a
// driver that are not its public API, as grpc-go reaches its own through
// its internal package: package driver sets [Core] in its init, and no
// package outside this module can import it.
package internal

import (
	"fmt"

	"golang.org/x/time/rate"
)

// Core returns the reconciler's access to a *driver.Driver. Package
// reconciler asserts the result to the interface it needs, once, in its
// constructor.
var Core func(driver any) any

// Change is a write the reconciler asks of the driver's guarded patch.
type Change int

const (
	// NoChange: the sandbox converged meanwhile; nothing is sent.
	NoChange Change = iota
	// Suspend sets the intent to stopped and drops the bootstrap mark.
	Suspend
	// ClearBootstrap drops the bootstrap mark of a sandbox that started.
	ClearBootstrap
)

// Limit checks the qps and burst given to the option named option (such
// as "driver: WithEventLimit") and returns the qps as rate.Limiter takes
// it. qps must be positive and burst at least 1: a limit of 0 lets the
// first burst through and then nothing ever again, and a burst of 0
// refuses everything. rate.Limiter knows only rate.Inf as no limit; +Inf
// would make NaN tokens.
func Limit(option string, qps float64, burst int) (float64, error) {
	switch {
	case !(qps > 0):
		return 0, fmt.Errorf("%s qps must be positive, got %v", option, qps)
	case burst < 1:
		return 0, fmt.Errorf("%s burst must be at least 1, got %d", option, burst)
	}
	return min(qps, float64(rate.Inf)), nil
}
