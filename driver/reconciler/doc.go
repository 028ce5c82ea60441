// Package reconciler is the controller of a [driver.Driver]'s sandboxes: it
// converges each with its namespace's fence instead of repeating itself.
//
// # Run
//
// [Reconciler.Run] is built the way Kubernetes controllers are: shared
// informers for the gateway's sandboxes (agent-sandbox's typed informers)
// and each namespace's fence, a rate-limited workqueue and a worker pool
// that bounds the writes in flight ([WithWorkers]); their rate is the API
// server's to bound (Priority and Fairness) unless [WithWriteLimit] sets
// one or the driver's rest.Config a client QPS. A fence
// event queues every sandbox of its namespace; a sandbox event queues that
// sandbox; a jittered resync ([WithPeriod], [WithJitter]) queues every
// cached sandbox, as a safety net that never beats in step with a timeout
// of the same length. The queue is the one write path: it never hands one
// sandbox to two workers at once. Each sandbox is decided with the pure
// function [Decide], whose doc is the table of states, and written through
// the driver's resourceVersion-guarded patch. A failed write is queued
// again with backoff.
//
// [WithScope] chooses the watches: one Sandbox watch and one fence watch
// per namespace, which needs only a Role in each, or one of each for the
// whole cluster, label- and field-selected and filtered to the served
// namespaces, which needs a ClusterRole for list and watch. By default
// ([ScopeAuto]) a gateway of [DefaultClusterThreshold] namespaces or more
// watches the whole cluster when the API server allows it. Either way the
// caches keep only what the reconciler reads: of a sandbox the driver's
// view without its conditions, of a fence its identity and generation.
//
// Unknown is not absent: until the caches have synced, and while a fence's
// list or watch fails (or its watch ended and it has not listed again),
// nothing is decided for that namespace; a fence is absent only when the
// API server said so.
//
// [Reconciler.Pass] is one sweep that reads from the API server, for a
// program that reconciles once. One reconciler runs one Run or Pass at a
// time: another fails with [ErrBusy].
//
// With [WithLeaderElection] several replicas share the work through a
// coordination.k8s.io/v1 Lease: all keep warm caches, only the leader
// writes, and a leader that loses the lease stops its workers before it
// releases it.
//
// [New] starts nothing, and refuses an invalid option with an error naming
// the option and the value; each option's doc states its default and its
// bounds.
//
// # Observing
//
// An [Observer] ([WithObserver]) hears the counts of each pass and each
// action carried out or failed, with the time from a fence change to the
// suspension that answered it. [WithQueueMetrics] gives the work queue a
// client-go workqueue.MetricsProvider. Package
// [github.com/kubewire/kubewire/driver/drivermetrics] is both, as
// Prometheus collectors; this package imports no metrics library.
package reconciler
