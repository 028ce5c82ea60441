package core

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Get reads the sandbox and checks that the driver owns it.
func (c *Core) Get(ctx context.Context, ns, name string) (Sandbox, error) {
	client, err := c.sandboxes(ctx)
	if err != nil {
		return Sandbox{}, err
	}
	s, err := client.get(ctx, ns, name)
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

// List reads every page of the gateway's sandboxes in ns. It does not look up pods ([Core.CheckPods]): the reconciler
// decides from intent, not from whether a stopped sandbox's pod is gone
// yet.
func (c *Core) List(ctx context.Context, ns string) ([]Sandbox, error) {
	client, err := c.sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var out []Sandbox
	opts := metav1.ListOptions{LabelSelector: c.Selector(), Limit: pageSize}
	for {
		page, next, err := client.list(ctx, ns, opts)
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
	client, err := c.sandboxes(ctx)
	if err != nil {
		return Sandbox{}, err
	}
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
	return client.create(ctx, meta, *tmpl.DeepCopy())
}

// Delete deletes the sandbox if its uid is uid.
func (c *Core) Delete(ctx context.Context, ns, name string, uid types.UID) error {
	client, err := c.sandboxes(ctx)
	if err != nil {
		return err
	}
	return client.delete(ctx, ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

// CheckPods settles Stopping from Stopped for stopped v1alpha1 sandboxes,
// whose controllers (agent-sandbox v0.4.x) report Ready=True with replicas
// 0 whether or not the pod is still terminating, and refuse, silently, to
// delete a pod of that name they do not own. For each such sandbox it reads
// the pod the controller names (the pod-name annotation, else the sandbox's
// name): gone is Stopped, the sandbox's own is Stopping, another's is the
// stop that cannot complete. One GET per stopped v1alpha1 sandbox; none on
// v1beta1, whose controllers say all this in the Suspended condition.
func (c *Core) CheckPods(ctx context.Context, sandboxes []Sandbox) error {
	for i := range sandboxes {
		s := &sandboxes[i]
		if s.Version != sandboxv1alpha1.GroupVersion.Version || s.Running || s.Deleting {
			continue
		}
		pod, err := c.Kube.CoreV1().Pods(s.Namespace).Get(ctx, s.podName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			s.pod = podAbsent
		case err != nil:
			return err
		case metav1.IsControlledBy(pod, &metav1.ObjectMeta{UID: s.UID}):
			s.pod = podPresent
		default:
			s.pod = podNotOwned
		}
		*s = withPhase(*s)
	}
	return nil
}
