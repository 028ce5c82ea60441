package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Get reads the sandbox and checks that the driver owns it.
func (c *Core) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	s, err := c.get(ctx, ns, name)
	if err != nil {
		return Sandbox{}, err
	}
	if s.labels[LabelManagedBy] != c.DriverName || s.labels[LabelGateway] != c.Gateway {
		return Sandbox{}, fmt.Errorf("%w (%s for gateway %s)", ErrNotOwned, c.DriverName, c.Gateway)
	}
	return s, nil
}

// pageSize is the page size of List: the API server's default cap for a
// watch cache served list is far above it, and 500 is what kubectl and
// client-go's pager ask for.
const pageSize = 500

// List reads every page of the gateway's sandboxes in ns.
func (c *Core) List(ctx context.Context, ns string) ([]Sandbox, error) {
	var out []Sandbox
	opts := metav1.ListOptions{LabelSelector: c.Selector(), Limit: pageSize}
	for {
		page, next, err := c.list(ctx, ns, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		opts.Continue = next
	}
}

// Create creates the sandbox, running, admitted under fence.
func (c *Core) Create(ctx context.Context, ns, name string, fence Fence, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error) {
	meta := metav1.ObjectMeta{
		Name:      name,
		Namespace: ns,
		Labels:    c.OwnLabels(),
		Annotations: map[string]string{
			AnnotationFenceUID:        string(fence.UID),
			AnnotationFenceGeneration: strconv.FormatInt(fence.Generation, 10),
			AnnotationBootstrap:       time.Now().UTC().Format(time.RFC3339),
		},
	}
	return c.create(ctx, meta, *tmpl.DeepCopy())
}

// Delete deletes the sandbox if its uid is uid.
func (c *Core) Delete(ctx context.Context, ns, name string, uid types.UID) error {
	return c.delete(ctx, ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}
