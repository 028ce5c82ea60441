package core

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// These call agent-sandbox's generated v1beta1 client and speak the
// driver's [Sandbox] view. All but mergePatch, which [Core.Update] calls
// after its own probe, check first that the API is served ([Core.Probe]).

func (c *Core) get(ctx context.Context, ns, name string) (Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return Sandbox{}, err
	}
	o, err := c.Sandboxes.AgentsV1beta1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return fromV1beta1(o), nil
}

// list returns one page and the continue token of the next.
func (c *Core) list(ctx context.Context, ns string, opts metav1.ListOptions) ([]Sandbox, string, error) {
	if err := c.Probe(ctx); err != nil {
		return nil, "", err
	}
	l, err := c.Sandboxes.AgentsV1beta1().Sandboxes(ns).List(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	out := make([]Sandbox, len(l.Items))
	for i := range l.Items {
		out[i] = fromV1beta1(&l.Items[i])
	}
	return out, l.Continue, nil
}

func (c *Core) create(ctx context.Context, meta metav1.ObjectMeta, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return Sandbox{}, err
	}
	o, err := c.Sandboxes.AgentsV1beta1().Sandboxes(meta.Namespace).Create(ctx, newV1beta1(meta, tmpl), metav1.CreateOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return fromV1beta1(o), nil
}

func (c *Core) mergePatch(ctx context.Context, ns, name string, body []byte) (Sandbox, error) {
	o, err := c.Sandboxes.AgentsV1beta1().Sandboxes(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return fromV1beta1(o), nil
}

func (c *Core) delete(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	if err := c.Probe(ctx); err != nil {
		return err
	}
	return c.Sandboxes.AgentsV1beta1().Sandboxes(ns).Delete(ctx, name, opts)
}
