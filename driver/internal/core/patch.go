package core

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		last = c.update(ctx, ns, name, &current, &out, conflict, decide)
		if apierrors.IsConflict(last) {
			conflict = last
		}
		return last
	})
	if err == nil {
		// client-go before v0.37 (the driver supports v0.36) returns nil
		// when the last error wraps context.Canceled or DeadlineExceeded
		// (retry.OnError takes it for its own wait being interrupted): a
		// PATCH that timed out would read as a success.
		err = last
	}
	if err != nil {
		return Sandbox{}, err
	}
	return out, nil
}

// update is one try of [Core.Update]: it reads the sandbox unless *current
// holds it, decides, and sends the patch, leaving what the API server
// answered, or the sandbox as it was read, in *out.
func (c *Core) update(ctx context.Context, ns, name string, current **Sandbox, out *Sandbox, conflict error, decide func(Sandbox, error) *Patch) error {
	var s Sandbox
	if *current != nil {
		s, *current = **current, nil
	} else {
		var err error
		if s, err = c.Get(ctx, ns, name); err != nil {
			return err
		}
	}
	p := decide(s, conflict)
	if p == nil {
		*out = s
		return nil
	}
	p.Metadata.ResourceVersion = s.ResourceVersion
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	*out, err = c.mergePatch(ctx, ns, name, body)
	return err
}
