package core

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
)

// sandboxClient is agent-sandbox's generated client for one served
// version, speaking the driver's [Sandbox] view.
type sandboxClient interface {
	version() string
	get(ctx context.Context, ns, name string) (Sandbox, error)
	// list returns one page and the continue token of the next.
	list(ctx context.Context, ns string, opts metav1.ListOptions) ([]Sandbox, string, error)
	create(ctx context.Context, meta metav1.ObjectMeta, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error)
	mergePatch(ctx context.Context, ns, name string, body []byte) (Sandbox, error)
	delete(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error
}

// generated is the method set the generated typed clients of both
// versions share.
type generated[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

type typedClient[T, L any] struct {
	ver    string
	client func(ns string) generated[T, L]
	from   func(T) Sandbox
	items  func(L) ([]T, string)
	build  func(metav1.ObjectMeta, sandboxv1beta1.PodTemplate) T
}

func newSandboxClient(cs versioned.Interface, version string) sandboxClient {
	if version == sandboxv1alpha1.GroupVersion.Version {
		return &typedClient[*sandboxv1alpha1.Sandbox, *sandboxv1alpha1.SandboxList]{
			ver: version,
			client: func(ns string) generated[*sandboxv1alpha1.Sandbox, *sandboxv1alpha1.SandboxList] {
				return cs.AgentsV1alpha1().Sandboxes(ns)
			},
			from: fromV1alpha1,
			items: func(l *sandboxv1alpha1.SandboxList) ([]*sandboxv1alpha1.Sandbox, string) {
				return pointers(l.Items), l.Continue
			},
			build: newV1alpha1,
		}
	}
	return &typedClient[*sandboxv1beta1.Sandbox, *sandboxv1beta1.SandboxList]{
		ver: version,
		client: func(ns string) generated[*sandboxv1beta1.Sandbox, *sandboxv1beta1.SandboxList] {
			return cs.AgentsV1beta1().Sandboxes(ns)
		},
		from: fromV1beta1,
		items: func(l *sandboxv1beta1.SandboxList) ([]*sandboxv1beta1.Sandbox, string) {
			return pointers(l.Items), l.Continue
		},
		build: newV1beta1,
	}
}

func (c *typedClient[T, L]) version() string { return c.ver }

func (c *typedClient[T, L]) get(ctx context.Context, ns, name string) (Sandbox, error) {
	o, err := c.client(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return c.from(o), nil
}

func (c *typedClient[T, L]) list(ctx context.Context, ns string, opts metav1.ListOptions) ([]Sandbox, string, error) {
	l, err := c.client(ns).List(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	items, next := c.items(l)
	out := make([]Sandbox, len(items))
	for i, o := range items {
		out[i] = c.from(o)
	}
	return out, next, nil
}

func (c *typedClient[T, L]) create(ctx context.Context, meta metav1.ObjectMeta, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error) {
	o, err := c.client(meta.Namespace).Create(ctx, c.build(meta, tmpl), metav1.CreateOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return c.from(o), nil
}

func (c *typedClient[T, L]) mergePatch(ctx context.Context, ns, name string, body []byte) (Sandbox, error) {
	o, err := c.client(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return c.from(o), nil
}

func (c *typedClient[T, L]) delete(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return c.client(ns).Delete(ctx, name, opts)
}

// pointers returns a pointer to each element of items.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
