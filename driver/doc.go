// Package driver is a thin Kubernetes driver for the Sandbox resources of
// agent-sandbox (sigs.k8s.io/agent-sandbox, group agents.x-k8s.io), meant
// to be embedded in a gateway process. The controller that keeps the
// sandboxes inside their namespaces' fences is package
// [github.com/kubewire/kubewire/driver/reconciler].
//
// # Operations
//
// [Driver] creates, gets, lists, stops, starts and deletes the sandboxes it
// owns (labelled with the driver and the gateway), through agent-sandbox's
// own API types and generated clientset. Every client it makes goes
// through kubeadapter.Apply: a timeout per request, connection facts in
// errors, and retries of transport errors. Writes are JSON merge patches
// guarded by metadata.resourceVersion, and deletes name the sandbox's uid
// as a precondition: by Kubernetes' rules a second copy of either is
// harmless, so kubeadapter re-sends them when their connection failed
// (kubeadapter.Resendable). A 409 Conflict re-reads and decides again; a
// patch that would change nothing is not sent. Create checks what the CRD
// requires (a pod template with named containers) and sends nothing when
// it is missing.
//
// [New] builds the driver's clients from a rest.Config; [NewForClients]
// takes clientsets a program or a test (client-go's fake clientsets)
// built.
//
// Errors are [*Error] values with the operation, the sandbox and a [Kind];
// they keep the whole chain, so errors.Is(err, context.DeadlineExceeded)
// works and the message shows the root cause and the connection it died on.
//
// # Releases of agent-sandbox
//
// The driver speaks the v1beta1 API, which agent-sandbox serves from v0.5.0
// on and alone from v1.0.0, through the project's own types and clientset.
// It asks discovery, until one answer says so, whether v1beta1 is served; a
// cluster that serves only v1alpha1 (v0.4.x and earlier) fails every
// operation with an error that names the upgrade path
// ([KindPrecondition]). A sandbox is read into one view, [Sandbox], whose
// [Phase] is derived from the intent (spec.operatingMode) and the
// conditions the controller wrote for the current generation
// (docs/agent-sandbox.md has the table):
//
//   - Right after a stop or start every condition is stale (the patch
//     bumped the generation): the phase is Stopping or Starting, by intent.
//   - The intent decides which conditions count: the controller keeps the
//     Suspended condition after a resume, so a running sandbox is never
//     Stopped, and a stopped one is Stopped only on Suspended=True.
//   - Suspended=False reason PodNotOwned means the stop cannot complete,
//     which is Error (and Stop returns [KindPrecondition]).
//   - A pod that succeeded, or a sandbox that expired under shutdownPolicy
//     Retain, is Finished: terminal, not a failure.
//   - A reason the driver does not know is Unknown, with that reason: never
//     guessed.
//
// # The workload fence
//
// Each namespace has a fence NetworkPolicy that denies workload egress. Its
// identity is (metadata.uid, metadata.generation). Create and start record
// that pair in the Sandbox's annotations kubewire.io/fence-uid and
// kubewire.io/fence-generation (with kubewire.io/bootstrap-started, the
// time the start began, until it is Ready or stopped); a sandbox whose
// recorded pair differs from the live policy runs outside the current
// fence, which the reconciler acts on.
//
// # Events
//
// Events are events.k8s.io/v1 Events written by client-go's recorder
// (k8s.io/client-go/tools/events) in the background, through a client of
// their own, as the kubelet's are; repeats of one Event become a series.
// They are best effort, as in Kubernetes: one over the event limit
// ([WithEventLimit]) is dropped at once, so that the Events written go out
// within moments of the writes they explain. A note longer than
// events.k8s.io/v1 allows (1,024 bytes) is cut. [Driver.Close] stops the
// recorder.
package driver
