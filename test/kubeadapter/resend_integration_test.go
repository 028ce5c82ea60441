package kubeadapter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// write is one kind of write TestResendByPrecondition cuts: do sends it
// to the ConfigMap cm (name, uid and resourceVersion as created, data
// empty) through cs.
type write struct {
	name   string
	method string
	// safe: its precondition makes a second copy harmless, so it is sent
	// again after a cut; otherwise it is sent once.
	safe bool
	do   func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error
	// deletes: applied, the ConfigMap is gone; else its data is {"n": "1"}.
	deletes bool
	// refused: a second copy after an applied one is refused (every safe
	// kind but apply, whose second copy changes nothing).
	refused bool
}

var one = map[string]string{"n": "1"}

func writes() []write {
	patch := func(pt types.PatchType, body string) func(context.Context, kubernetes.Interface, *corev1.ConfigMap) error {
		return func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			b := fmt.Sprintf(body, cm.ResourceVersion)
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, pt, []byte(b), metav1.PatchOptions{})
			return err
		}
	}
	apply := func(force bool) func(context.Context, kubernetes.Interface, *corev1.ConfigMap) error {
		return func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Apply(ctx, corev1apply.ConfigMap(cm.Name, cm.Namespace).WithData(one),
				metav1.ApplyOptions{FieldManager: "resend-test", Force: force})
			return err
		}
	}
	update := func(guarded bool) func(context.Context, kubernetes.Interface, *corev1.ConfigMap) error {
		return func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			cm = cm.DeepCopy()
			cm.Data = one
			if !guarded {
				cm.ResourceVersion = ""
			}
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}
	}
	del := func(opts func(*corev1.ConfigMap) metav1.DeleteOptions) func(context.Context, kubernetes.Interface, *corev1.ConfigMap) error {
		return func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			return cs.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, opts(cm))
		}
	}
	return []write{
		{name: "update with resourceVersion", refused: true, method: http.MethodPut, safe: true, do: update(true)},
		{name: "merge patch with resourceVersion", refused: true, method: http.MethodPatch, safe: true,
			do: patch(types.MergePatchType, `{"metadata":{"resourceVersion":%q},"data":{"n":"1"}}`)},
		{name: "strategic merge patch with resourceVersion", refused: true, method: http.MethodPatch, safe: true,
			do: patch(types.StrategicMergePatchType, `{"metadata":{"resourceVersion":%q},"data":{"n":"1"}}`)},
		{name: "JSON patch testing resourceVersion", refused: true, method: http.MethodPatch, safe: true,
			do: patch(types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":%q},{"op":"add","path":"/data","value":{"n":"1"}}]`)},
		{name: "apply without force", method: http.MethodPatch, safe: true, do: apply(false)},
		{name: "delete with uid precondition", refused: true, method: http.MethodDelete, safe: true, deletes: true,
			do: del(func(cm *corev1.ConfigMap) metav1.DeleteOptions {
				return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}}
			})},
		{name: "delete with resourceVersion precondition", refused: true, method: http.MethodDelete, safe: true, deletes: true,
			do: del(func(cm *corev1.ConfigMap) metav1.DeleteOptions {
				return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}}
			})},

		{name: "update without resourceVersion", method: http.MethodPut, do: update(false)},
		{name: "merge patch without resourceVersion", method: http.MethodPatch,
			do: patch(types.MergePatchType, `{"data":{"n":"1"}}%.0s`)},
		{name: "JSON patch without test", method: http.MethodPatch,
			do: patch(types.JSONPatchType, `[{"op":"add","path":"/data","value":{"n":"1"}}]%.0s`)},
		{name: "apply with force", method: http.MethodPatch, do: apply(true)},
		{name: "delete without preconditions", method: http.MethodDelete, deletes: true,
			do: del(func(*corev1.ConfigMap) metav1.DeleteOptions { return metav1.DeleteOptions{} })},
		{name: "create", method: http.MethodPost, do: func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: cm.Name + "-c", Namespace: cm.Namespace}, Data: one}, metav1.CreateOptions{})
			return err
		}},
	}
}

// resendWrites is how many writes of each kind and encoding
// TestResendByPrecondition sends: KUBEWIRE_RESEND_WRITES, default 12.
func resendWrites(t *testing.T) int {
	n := 12
	if s := os.Getenv("KUBEWIRE_RESEND_WRITES"); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(t, err, "KUBEWIRE_RESEND_WRITES")
		n = v
	}
	return n
}

// TestResendByPrecondition: a real API server behind a TLS proxy that cuts
// the client's connection at a random phase of each write: before
// forwarding it, when the client sends on an idle connection, or after
// the API server answered it (the write was applied; the client cannot
// know). Through kubeadapter.Apply's defaults, in JSON and protobuf:
//   - a write whose precondition makes a second copy harmless is sent
//     again; it comes back applied, or refused with its status code and
//     reason (apierrors.IsConflict, IsNotFound, or IsInvalid for a JSON
//     patch whose test fails) and a message saying the earlier copy may
//     have been applied; either way the object is as one application
//     leaves it;
//   - any other write is sent exactly once, counted at the client.
//
// The retry budget is off: a burst of cuts would otherwise spend it, and
// what it refuses is TestRetryBudget's subject. Run the long form with
// KUBEWIRE_RESEND_WRITES=200 (see docs/resend.md).
func TestResendByPrecondition(t *testing.T) {
	admin := env.Config(t)
	cs, err := kubernetes.NewForConfig(admin)
	require.NoError(t, err)
	ns := namespace(t, cs)
	n := resendWrites(t)
	rng := rand.New(rand.NewPCG(uint64(n), 31))
	phases := []transporttest.Fault{transporttest.ResetBeforeForward, transporttest.CloseOnSend, transporttest.ResetAfterResponse}
	for _, encoding := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		for _, w := range writes() {
			t.Run(w.name+"/"+encoding, func(t *testing.T) {
				cfg, proxy := kubetest.Proxied(t, admin)
				cfg.ContentType = encoding
				var seen attempts
				require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithRetryOptions(retry.WithoutBudget()),
					kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: seen.observe})))
				cut, err := kubernetes.NewForConfig(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				var maybeApplied, resent int
				for i := 0; i < n; i++ {
					name := fmt.Sprintf("%s-%d", slug(w.name, encoding), i)
					cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
					require.NoError(t, err)
					// A connection to reuse, which the cut applies to.
					_, err = cut.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
					require.NoError(t, err)
					phase := phases[rng.IntN(len(phases))]
					if i == 0 {
						// At least one cut after the API server applied it.
						phase = transporttest.ResetAfterResponse
					}
					before := seen.count(w.method)
					proxy.SetFaultExistingOnce(phase)
					err = w.do(ctx, cut, cm)
					proxy.SetFault(transporttest.NoFault)
					sent := seen.count(w.method) - before
					if !w.safe {
						assert.Equal(t, 1, sent, "%s, cut %d: sent once (%v)", name, phase, err)
						continue
					}
					if sent > 1 {
						resent++
					}
					if err != nil {
						// A JSON patch whose test fails is refused 422.
						assert.True(t, apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err), "%s, cut %d: %v", name, phase, err)
						assert.Contains(t, err.Error(), "the earlier copy may have been applied", name)
						maybeApplied++
					}
					got, gerr := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
					if w.deletes {
						assert.True(t, apierrors.IsNotFound(gerr), "%s, cut %d: deleted: %v", name, phase, gerr)
						continue
					}
					require.NoError(t, gerr)
					assert.Equal(t, one, got.Data, "%s, cut %d: applied once", name, phase)
				}
				if w.safe {
					assert.Positive(t, resent, "some copies were sent again")
					if w.refused {
						assert.Positive(t, maybeApplied, "a copy after an applied one is refused, saying so")
					}
					t.Logf("%d writes: %d sent again, %d refused as maybe applied", n, resent, maybeApplied)
				}
			})
		}
	}
}

// slug names a test's ConfigMaps after its write and encoding.
func slug(name, encoding string) string {
	b := []byte{}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b = append(b, byte(r))
		case r >= 'A' && r <= 'Z':
			b = append(b, byte(r-'A'+'a'))
		case len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
	}
	if encoding != "application/json" {
		b = append(b, "-pb"...)
	}
	return string(b)
}
