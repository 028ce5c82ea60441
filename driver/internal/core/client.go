package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	typedv1beta1 "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/typed/api/v1beta1"
)

// The driver's calls of agent-sandbox's generated v1beta1 client, in its
// [Sandbox] view. Each first checks that the API is served ([Core.Probe]).

func (c *Core) sandboxes(ns string) typedv1beta1.SandboxInterface {
	return c.Sandboxes.AgentsV1beta1().Sandboxes(ns)
}

// Get reads the sandbox and checks that the driver owns it.
func (c *Core) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return Sandbox{}, err
	}
	o, err := c.sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	if o.Labels[LabelManagedBy] != c.DriverName || o.Labels[LabelGateway] != c.Gateway {
		return Sandbox{}, fmt.Errorf("%w (%s for gateway %s)", ErrNotOwned, c.DriverName, c.Gateway)
	}
	return fromV1beta1(o), nil
}

// pageSize is the page size of List, what kubectl and client-go's pager
// ask for.
const pageSize = 500

// List reads every page of the gateway's sandboxes in ns.
func (c *Core) List(ctx context.Context, ns string) ([]Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return nil, err
	}
	var out []Sandbox
	opts := metav1.ListOptions{LabelSelector: c.Selector(), Limit: pageSize}
	for {
		l, err := c.sandboxes(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, fromV1beta1(&l.Items[i]))
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// Create creates the sandbox, running, admitted under fence.
func (c *Core) Create(ctx context.Context, ns, name string, fence Fence, tmpl sandboxv1beta1.PodTemplate) (Sandbox, error) {
	if err := c.Probe(ctx); err != nil {
		return Sandbox{}, err
	}
	meta := metav1.ObjectMeta{
		Name: name, Namespace: ns, Labels: c.OwnLabels(),
		Annotations: map[string]string{
			AnnotationFenceUID:        string(fence.UID),
			AnnotationFenceGeneration: strconv.FormatInt(fence.Generation, 10),
			AnnotationBootstrap:       time.Now().UTC().Format(time.RFC3339),
		},
	}
	o, err := c.sandboxes(ns).Create(ctx, newV1beta1(meta, *tmpl.DeepCopy()), metav1.CreateOptions{})
	if err != nil {
		return Sandbox{}, err
	}
	return fromV1beta1(o), nil
}

// Delete deletes the sandbox if its uid is uid.
func (c *Core) Delete(ctx context.Context, ns, name string, uid types.UID) error {
	if err := c.Probe(ctx); err != nil {
		return err
	}
	return c.sandboxes(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}
