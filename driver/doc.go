// Package driver is a thin Kubernetes driver for the Sandbox resources of
// agent-sandbox (sigs.k8s.io/agent-sandbox, group agents.x-k8s.io), meant
// to be embedded in a gateway process, with a reconciler that converges
// instead of repeating itself.
//
// # Operations
//
// [Driver] creates, gets, lists, stops, starts and deletes the sandboxes it
// owns (labelled with the driver and the gateway), through agent-sandbox's
// own API types and generated clientset. Every client it makes goes
// through kubeadapter.Apply: per-request budgets, connection facts in
// errors, and retries of transport errors. Stop and delete are idempotent by
// meaning and are marked so (retry.ContextWithIdempotent). Writes are JSON merge
// patches guarded by metadata.resourceVersion; a 409 Conflict re-reads and
// decides again; a patch that would change nothing is not sent. Create
// checks what the CRD requires (a pod template with named containers) and
// sends nothing when it is missing.
//
// Errors are [*Error] values with the operation, the sandbox and a [Kind];
// they keep the whole chain, so errors.Is(err, context.DeadlineExceeded)
// works and the message shows the root cause and the connection it died on.
//
// # Releases of agent-sandbox
//
// The driver probes the API once: v1beta1 (agent-sandbox v0.5.0 and later)
// or, when the API server does not serve it, v1alpha1 (v0.4.x and earlier).
// Both are read into one view, [Sandbox], whose [Phase] is derived by
// [DerivePhase] from the intent and the conditions the controller wrote for
// the current generation. Releases differ, and the derivation follows each:
//
//   - Right after a stop or start every condition is stale (the patch
//     bumped the generation): the phase is Stopping or Starting, by intent.
//   - v0.5+: Suspended=True is Stopped; Suspended=False reason PodNotOwned
//     means the stop cannot complete, which is Error (and Stop returns
//     [KindPrecondition]).
//   - v0.4.x reports Ready=True for a sandbox with replicas 0 whether or not
//     its pod still exists: the driver lists the sandbox's pods (labelled
//     through the pod template) and reports Stopping until they are gone.
//   - A pod that succeeded, or a sandbox that expired under shutdownPolicy
//     Retain, is Finished: terminal, not a failure.
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
// [Reconciler.Run] is event-driven, built on client-go's machinery: shared
// informers for the gateway's sandboxes (agent-sandbox's typed informers)
// and each namespace's fence, a rate-limited workqueue, and a worker pool
// whose writes are bounded ([WithWorkers], [WithWriteLimit]). A fence event
// queues every sandbox of its namespace; a sandbox event queues that
// sandbox. Each is decided with the pure function [Decide] from the cache.
// The rule for a fence mismatch:
//
//	running, or bootstrapping a create/start   suspend once, one warning and one Event
//	stopping (suspension in progress)          nothing more to do, no warning
//	suspended and stable                       converged: no patch, no warning
//	deleting                                   nothing
//
// A start that the controller reports failed, or stuck (DependenciesNotReady,
// Unschedulable) for the current generation past the bootstrap grace is
// rolled back: suspended, never deleted.
//
// Unknown is not absent: until the caches have synced, and while a fence's
// list or watch fails (or its watch ended and it has not listed again),
// nothing is decided for that namespace; a fence is absent only when the API
// server said so. A failed write is queued again with backoff. A jittered
// resync ([WithPeriod], [WithJitter]) runs [Reconciler.Pass] over the cache
// as a safety net, so that it never beats in step with a timeout of the
// same length. Pass also works alone, reading from the API server.
//
// [NewReconciler] starts nothing, and refuses an invalid option with an
// error naming the option and the value; each option's doc states its
// default and its bounds.
//
// With [WithLeaderElection] several replicas share the work through a
// coordination.k8s.io/v1 Lease: all keep warm caches, only the leader
// writes, and a leader that loses the lease stops its workers before it
// releases it.
//
// # Observing
//
// [WithObserver] reports the counts of each pass; [WithActionObserver]
// reports each action carried out and each failure, in passes and in Run's
// workers, with the time from a fence change to the suspension that
// answered it; [Reconciler.QueueDepth] reads the work queue. Package
// [github.com/kubewire/kubewire/driver/drivermetrics] turns them into
// Prometheus collectors; this package imports no metrics library. The work
// queue is named "kubewire-driver": where client-go's workqueue has a
// metrics provider (workqueue.SetProvider; controller-runtime installs one
// that registers in its own registry), client-go's workqueue_* metrics
// appear for it under that name.
//
// Events are events.k8s.io/v1 Events written by client-go's recorder
// (k8s.io/client-go/tools/events) in the background; repeats of one Event
// become a series. [Driver.Close] stops it.
package driver
