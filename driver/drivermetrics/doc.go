// Package drivermetrics exports the work of a [reconciler.Reconciler] as
// Prometheus metrics. Package reconciler imports no metrics library; this
// package is its [reconciler.Observer] and its work queue's
// workqueue.MetricsProvider, as collectors that a user registers on a
// registry of their own:
//
//	m := drivermetrics.New()
//	reg.MustRegister(m)
//	rec, err := reconciler.New(d, reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()))
//
// # Metrics
//
// Every name has the namespace kubewire and the subsystem reconciler. The
// only label is action, whose values are fixed; no metric carries a URL,
// host, namespace or sandbox name.
//
//	kubewire_reconciler_passes_total                             counter    passes (Reconciler.Pass)
//	kubewire_reconciler_pass_duration_seconds                    histogram  duration of a pass
//	kubewire_reconciler_actions_total{action}                    counter    actions carried out: suspend, rollback, clear_bootstrap
//	kubewire_reconciler_warnings_total                           counter    actions that warned (a warning log line and an Event)
//	kubewire_reconciler_events_dropped_total                     counter    warnings whose Event was dropped over the driver's event limit
//	kubewire_reconciler_errors_total                             counter    failed reads and writes
//	kubewire_reconciler_fence_to_suspend_seconds                 histogram  fence change observed to suspension written
//	kubewire_reconciler_queue_depth                              gauge      sandboxes waiting in Run's work queue
//	kubewire_reconciler_queue_adds_total                         counter    sandboxes queued: by an event, a resync or a retry
//	kubewire_reconciler_queue_retries_total                      counter    sandboxes queued again with backoff
//	kubewire_reconciler_queue_latency_seconds                    histogram  wait in the queue before a worker took it
//	kubewire_reconciler_queue_work_duration_seconds              histogram  a worker's time on one sandbox
//	kubewire_reconciler_queue_unfinished_work_seconds            gauge      time the workers have spent so far on the sandboxes they hold
//	kubewire_reconciler_queue_longest_running_processor_seconds  gauge      the longest of those times
//
// Actions, warnings and errors count what passes and Run's workers do
// alike, each once ([reconciler.ActionEvent]): a pass that suspends five
// sandboxes adds one to passes_total and five to
// actions_total{action="suspend"}. errors_total counts each error a pass
// returns (a namespace it could not read, a sandbox it could not write) and
// each sandbox Run's workers queue again after a failure (its fence
// unknown, its write failed): a sandbox whose write fails twice and then
// succeeds counts two errors and one action. Retries inside the HTTP stack
// (package retry) are not the reconciler's and are not counted here.
//
// fence_to_suspend_seconds observes one suspension per sandbox and fence
// change that Run's informers saw: from the fence's watch event to the
// suspension written, through any retries. Suspensions that answer no
// observed fence change (a pass, a fence found missing at start-up) count
// in actions_total only. The histograms' buckets run from 5 ms to 10
// minutes: at 50 writes a second (reconciler.WithWriteLimit), a fence
// change over 30,000 sandboxes takes 10 minutes to answer.
//
// events_dropped_total counts the warnings whose Event the driver dropped
// over its event limit (driver.WithEventLimit): Events are best effort,
// and the warning stays in the reconciler's log.
//
// The queue metrics are the sum over every reconciler a Metrics is wired
// to; queue_longest_running_processor_seconds is the longest of theirs.
// client-go's work queue sets it and queue_unfinished_work_seconds every
// 500 ms: they show a worker stuck on a write that does not return, which
// queue_work_duration_seconds observes only once it is done. When a
// leadership term ends, the sandboxes still queued are taken off unworked
// (the next leader queues them all); they still count in
// queue_latency_seconds and queue_work_duration_seconds. Between terms no
// worker runs, and the unfinished-work gauges read zero.
package drivermetrics
