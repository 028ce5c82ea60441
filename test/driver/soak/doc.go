// Package soak judges a gateway run for minutes under mixed connection
// faults the way Jepsen does: a history of client operations, each with
// its answer, checked against an independent record, the API server's own
// audit log.
//
// # The run
//
// [Run] starts kube-apiserver and etcd (envtest) with [AuditPolicy], the
// agent-sandbox controller and a fake kubelet, a fault proxy in front of
// the API server and the gateway behind it ([Process]: examples/gateway
// run as a process). Clients ([Config.Clients])
// each own a few sandboxes and send create, stop, start, delete and get
// through the gateway's HTTP API; an administrator changes the fence
// directly. Faults come from a plan drawn from the seed ([Config.Seed]),
// each a Poisson process at its rate per minute: a reset before the
// request is forwarded, a reset after the server answered, a close on
// reuse, an idle-flow drop after the load balancer's idle time (with quiet
// spells for flows to go idle), a stall, a black hole, and a restart of
// kube-apiserver on the same etcd in the middle of the run. Every
// operation and its answer is written to the history (JSON lines).
//
// [ScenarioHA] runs the same gateway, workload and checks on two
// kube-apiservers behind a load balancer, with --goaway-chance=0.02,
// through a graceful rolling restart and a replica killed and started
// again, without the connection faults ([Config.UseScenario]).
// Operations that did not succeed are filed by cause and by the fault
// window they overlap ([Result.FailuresByCause]).
//
// # Correlation
//
// Each operation has an ID, sent as its call's X-Request-Id ([OpHeader]).
// The gateway sends it as the Audit-ID of every API request it makes for
// the operation, and a proxy between the fault proxy and the API server
// marks it with kubeadapter.Resendable's answer. kube-apiserver
// records a client's Audit-ID as it is, and accepts the same one on many
// requests (k8s.io/apiserver's WithAuditInit), so the audit log files every
// request of an operation, and every copy of one, under the operation.
// Requests of the gateway without an operation are its informers' and
// reconciler's: they are counted apart ([Result.Background]).
//
// # What is checked
//
//   - Duplicates: a write the API server executed more than once for one
//     operation is the same verb on the same object with the same request
//     body (the audit log keeps the body; a new decision, such as a patch
//     after a 409, carries another resourceVersion). For a create, or a
//     write kubewire may not re-send (the Audit-ID carries
//     kubeadapter.Resendable's answer), any second execution is a
//     violation; re-executions of re-sendable writes (stop's and the
//     reconciler's patches guarded by resourceVersion, deletes with a uid
//     precondition) are counted apart.
//   - Acknowledgements: an acknowledged answer describes the newest
//     version of the sandbox that its operation's own requests read or
//     wrote (the gateway answers from the driver's last request, and
//     names no resourceVersion); that version must be in the record with
//     the answer's intent, and until the next change of intent nothing may
//     undo it but a later operation on the sandbox or the reconciler
//     suspending it for a fence change (the fence's generation at that
//     resourceVersion tells).
//   - Final state: each sandbox's final state is the record's last, every
//     change of intent in the record is someone's, and no sandbox runs
//     outside the final fence once the reconciler converged.
//   - Amplification (API requests per operation), latency with and without
//     a fault window overlapping the operation, and the gateway process's
//     goroutines, open files and heap from its /metrics, before and after.
//
// The record orders versions by resourceVersion, which kube-apiserver
// takes from etcd's revision, one sequence for the cluster. A write whose
// client went away while it ran is logged 504 though it may have been
// applied: such writes count as maybe applied, and a change of intent that
// only a later read shows is theirs.
package soak
