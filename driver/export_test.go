package driver

import "time"

// NextWait exposes the reconciler's jittered wait to the tests.
func NextWait(r *Reconciler) time.Duration { return r.next() }

// Explain returns the reason DerivePhase's phase came from.
func Explain(s Sandbox) string { return withPhase(s).Reason }
