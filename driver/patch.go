package driver

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// maxConflicts bounds re-reads after 409 Conflict in one operation.
const maxConflicts = 5

// update applies the merge patch that decide returns for the current state
// of the sandbox, guarded by its resourceVersion. current, if not nil, is
// the state to start from (a listed object); otherwise it is read. On 409
// Conflict it reads again and decides again. A nil patch means nothing to
// change; nothing is sent.
//
// The guard makes the patch safe to retry after a transport error: a copy
// that reached the API server twice fails the second time with 409 and is
// decided again from what the first one wrote.
func (d *Driver) update(ctx context.Context, op, ns, name string, current *Sandbox, decide func(Sandbox) *patch) (Sandbox, error) {
	client, err := d.sandboxes(ctx)
	if err != nil {
		return Sandbox{}, wrap(op, ns, name, err)
	}
	for i := 0; i < maxConflicts; i++ {
		var s Sandbox
		if current != nil && i == 0 {
			s = *current
		} else if s, err = d.get(ctx, op, ns, name); err != nil {
			return Sandbox{}, err
		}
		p := decide(s)
		if p == nil {
			return s, nil
		}
		p.Metadata.ResourceVersion = s.ResourceVersion
		body, err := json.Marshal(p)
		if err != nil {
			return Sandbox{}, wrap(op, ns, name, err)
		}
		out, err := client.mergePatch(ctx, ns, name, body)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return Sandbox{}, wrap(op, ns, name, err)
		}
		return out, nil
	}
	return Sandbox{}, &Error{Op: op, Namespace: ns, Name: name, Kind: KindConflict, Err: fmt.Errorf("the sandbox changed %d times while it was being updated", maxConflicts)}
}
