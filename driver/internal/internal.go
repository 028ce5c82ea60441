// Package internal is how package reconciler reaches the parts of a
// driver that are not its public API, as grpc-go reaches its own through
// its internal package: package driver sets [Core] in its init, and no
// package outside this module can import it.
package internal

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
