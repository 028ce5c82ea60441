package core

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Update applies the merge patch that decide returns for the current state
// of the sandbox, guarded by its resourceVersion. current, if not nil, is
// the state to start from (a listed object); otherwise it is read. On 409
// Conflict it reads again and decides again, as client-go's
// retry.RetryOnConflict paces it (retry.DefaultRetry: five tries); the
// last conflict is then the error. A nil patch means nothing to change;
// nothing is sent. decide gets the conflict that made it read again (nil
// the first time): kubeadapter.IsMaybeApplied(conflict) says it refused a
// copy sent again after the connection failed under an earlier one, which
// may have been applied.
//
// The guard makes the patch safe to retry after a transport error: a copy
// that reached the API server twice fails the second time with 409 and is
// decided again from what the first one wrote.
func (c *Core) Update(ctx context.Context, ns, name string, current *Sandbox, decide func(s Sandbox, conflict error) *Patch) (Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return Sandbox{}, err
	}
	var out Sandbox
	var conflict, last error
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		last = func() error {
			var s Sandbox
			if current != nil {
				s, current = *current, nil
			} else {
				var err error
				if s, err = c.Get(ctx, ns, name); err != nil {
					return err
				}
			}
			p := decide(s, conflict)
			if p == nil {
				out = s
				return nil
			}
			p.Metadata.ResourceVersion = s.ResourceVersion
			body, err := json.Marshal(p)
			if err != nil {
				return err
			}
			o, err := c.sandboxes(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
			if err == nil {
				out = fromV1beta1(o)
			}
			return err
		}()
		if apierrors.IsConflict(last) {
			conflict = last
		}
		return last
	})
	// The last try's error, not RetryOnConflict's: client-go's
	// retry.OnError returns the last conflict instead of an error that
	// wraps context.Canceled or DeadlineExceeded, taking it for its own
	// wait being interrupted, and nil when there was no conflict before
	// (before v0.37; the driver supports v0.36): a PATCH that timed out
	// would read as a success, or as a conflict.
	if last != nil {
		return Sandbox{}, last
	}
	return out, nil
}
