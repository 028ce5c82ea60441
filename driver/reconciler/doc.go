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
// one or the driver's rest.Config a client QPS. A fence event queues every
// sandbox of its namespace; a sandbox event queues that sandbox; a
// jittered resync ([WithPeriod]) queues every cached sandbox, as a safety
// net. The queue is the one write path: it never hands one sandbox to two
// workers at once. Each sandbox is decided by the table below and written
// through the driver's resourceVersion-guarded patch; a 409 Conflict reads
// it again and decides again. A failed write is queued again with backoff.
//
// A gateway of fewer than 10 namespaces opens one Sandbox watch and one
// fence watch per namespace, which needs only a Role in each. From 10 on,
// when the API server says that this client may list and watch sandboxes
// and network policies in every namespace (a SelfSubjectAccessReview
// each), it opens one of each for the whole cluster, label- and
// field-selected, and keeps of the objects of namespaces it does not serve
// only their keys. WithClusterWatch makes the choice instead. Either way the caches keep only what the reconciler
// reads: of a sandbox the driver's view without its conditions, of a fence
// its identity and generation.
//
// Unknown is not absent: until the caches have synced nothing is decided,
// and a fence is absent only when the API server said so. The caches keep
// no watch-health state of their own: after a broken watch a fence cache
// shows the fence as it was, which cannot suspend a sandbox wrongly.
// Before suspending a sandbox because its fence is absent or has another
// uid, the reconciler reads the fence from the API server; a fence at an
// older generation than the one a sandbox recorded decides nothing. A
// failed fence list or watch that client-go hands to its watch error
// handler reaches the observers as an error, and what changed meanwhile
// is acted on once the informer lists or watches again.
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
// # Decisions
//
// Each sandbox is decided from its cached view and its namespace's fence,
// by a pure function; the first row that matches wins:
//
//	deleting                                              none
//	fence unknown (its read failed)                       none
//	intent running (running or bootstrapping), fence
//	absent or recorded pair differs                       suspend, warn
//	  but recorded generation newer than the live one     none: this view is behind
//	intent stopped (stopping or stopped), mismatch        none: converged or converging
//	bootstrapping, Ready or Finished                      clear-bootstrap
//	bootstrapping past grace, and the controller reports
//	it failed (Error) or stuck (DependenciesNotReady,
//	Unschedulable) for the current generation             rollback, warn
//	anything else                                         none
//
// A bootstrap whose conditions are stale (the controller has not observed
// it yet) is unknown, not stuck: it is never rolled back. A warning is one
// log line and one Warning Event (reason StaleFence or BootstrapFailed).
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
