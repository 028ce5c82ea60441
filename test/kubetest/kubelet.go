package kubetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// PodFate is what the fake kubelet does with a pod.
type PodFate int

const (
	// PodRuns: Running and Ready, with a pod IP (the default).
	PodRuns PodFate = iota
	// PodUnschedulable: Pending, PodScheduled=False reason Unschedulable.
	PodUnschedulable
	// PodFails: Failed.
	PodFails
	// PodSucceeds: Succeeded.
	PodSucceeds
)

// holdFinalizer keeps a deleted pod terminating until [Kubelet.Release].
const holdFinalizer = "kubewire.io/fake-kubelet-hold"

// Kubelet stands in for the node agent, which envtest does not run: it
// sets the status of the pods of one namespace as a kubelet would for the
// fate the test chose, and can keep a deleted pod terminating. Without it
// no pod ever runs and no sandbox is ever Ready.
type Kubelet struct {
	t  testing.TB
	cs kubernetes.Interface
	ns string

	mu    sync.Mutex
	fates map[string]PodFate // by pod name
	hold  map[string]bool    // by pod name
}

// RunKubelet runs a fake kubelet for the pods of ns until the test ends.
func RunKubelet(t testing.TB, cfg *rest.Config, ns string) *Kubelet {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := &Kubelet{t: t, cs: cs, ns: ns, fates: map[string]PodFate{}, hold: map[string]bool{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			k.sync(pod.Name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("fake kubelet: the %v cache did not sync", typ)
		}
	}
	return k
}

// Set chooses the fate of the pod named name, from now on.
func (k *Kubelet) Set(name string, fate PodFate) {
	k.mu.Lock()
	k.fates[name] = fate
	k.mu.Unlock()
	k.sync(name)
}

// Hold keeps the pod named name terminating after it is deleted, until
// Release. Call it before the pod is created or while it exists.
func (k *Kubelet) Hold(name string) {
	k.mu.Lock()
	k.hold[name] = true
	k.mu.Unlock()
	k.sync(name)
}

// Release lets a held pod's deletion finish.
func (k *Kubelet) Release(name string) {
	k.mu.Lock()
	delete(k.hold, name)
	k.mu.Unlock()
	k.sync(name)
}

// sync makes the pod's status and finalizers what its fate says.
func (k *Kubelet) sync(name string) {
	k.mu.Lock()
	fate, hold := k.fates[name], k.hold[name]
	k.mu.Unlock()
	ctx := context.Background()
	pods := k.cs.CoreV1().Pods(k.ns)
	// An API server that restarts (a soak does that) is waited for.
	err := retry.OnError(restartBackoff, transient, func() error { return k.update(ctx, pods, name, fate, hold) })
	if err != nil && !apierrors.IsNotFound(err) {
		k.t.Errorf("fake kubelet: pod %s/%s: %v", k.ns, name, err)
	}
}

// restartBackoff outlasts a restart of kube-apiserver, on a loaded machine
// too: envtest alone may take 20s to stop it. About 2.5 minutes in all.
var restartBackoff = wait.Backoff{Steps: 60, Duration: 100 * time.Millisecond, Factor: 1.5, Cap: 3 * time.Second}

// transient reports whether err is the API server being away, not its
// answer.
func transient(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
}

func (k *Kubelet) update(ctx context.Context, pods typedcorev1.PodInterface, name string, fate PodFate, hold bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		held := slices.Contains(pod.Finalizers, holdFinalizer)
		switch {
		case hold && !held && pod.DeletionTimestamp == nil:
			pod.Finalizers = append(pod.Finalizers, holdFinalizer)
			_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
			return err
		case !hold && held:
			pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(f string) bool { return f == holdFinalizer })
			_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
			return err
		case pod.DeletionTimestamp != nil:
			return nil
		}
		want := status(fate, pod.Status)
		if equalStatus(pod.Status, want) {
			return nil
		}
		pod.Status = want
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

func status(fate PodFate, cur corev1.PodStatus) corev1.PodStatus {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) corev1.PodCondition {
		for _, c := range cur.Conditions {
			if c.Type == t && c.Status == s && c.Reason == reason {
				return c
			}
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
	}
	switch fate {
	case PodUnschedulable:
		return corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable),
		}}
	case PodFails:
		return corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, ""),
			cond(corev1.PodReady, corev1.ConditionFalse, "PodFailed"),
		}}
	case PodSucceeds:
		return corev1.PodStatus{Phase: corev1.PodSucceeded, Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, ""),
			cond(corev1.PodReady, corev1.ConditionFalse, "PodCompleted"),
		}}
	}
	// Recorded, never dialled; loopback so that nothing could leave the
	// machine if something did.
	const ip = "127.0.0.2"
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, ""),
			cond(corev1.ContainersReady, corev1.ConditionTrue, ""),
			cond(corev1.PodReady, corev1.ConditionTrue, ""),
		},
		PodIP:  ip,
		PodIPs: []corev1.PodIP{{IP: ip}},
	}
}

func equalStatus(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || a.PodIP != b.PodIP || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason {
			return false
		}
	}
	return true
}
