// Package driver is a thin Kubernetes driver for agent-sandbox Sandbox
// resources (agents.x-k8s.io), meant to be embedded in a gateway process,
// with a reconciler that converges instead of repeating itself.
//
// # Operations
//
// [Driver] creates, gets, lists, stops, starts and deletes the sandboxes it
// owns (labelled with the driver and the gateway). Every client it makes
// goes through kubeadapter.Apply: per-request budgets, connection facts in
// errors, and retries of transport errors. Stop and delete are idempotent by
// meaning and are marked so (retry.WithIdempotent). Writes are JSON merge
// patches guarded by metadata.resourceVersion; a 409 Conflict re-reads and
// decides again; a patch that would change nothing is not sent.
//
// Errors are [*Error] values with the operation, the sandbox and a [Kind];
// they keep the whole chain, so errors.Is(err, context.DeadlineExceeded)
// works and the message shows the root cause and the connection it died on.
//
// # The workload fence
//
// Each namespace has a fence NetworkPolicy that denies workload egress. Its
// identity is (metadata.uid, metadata.generation). Create and start record
// that pair in the Sandbox's annotations; a sandbox whose recorded pair
// differs from the live policy runs outside the current fence.
//
// # Reconciling
//
// [Reconciler.Pass] lists sandboxes and fences, decides for each sandbox
// with the pure function [Decide], and acts. The rule for a fence mismatch:
//
//	running, or bootstrapping a create/start   suspend once, one warning and one Event
//	stopping (suspension in progress)          nothing more to do, no warning
//	suspended and stable                       converged: no patch, no warning
//	deleting                                   nothing
//
// Unknown is not absent: a failed or timed-out read never leads to
// suspending or deleting anything; the pass reports the error and the next
// pass tries again. [Reconciler.Run] runs a pass at start and then every
// period with jitter, so it never beats in step with a timeout of the same
// length.
package driver
