package core

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReadFence reads the live fence of ns and whether it is present. A 404
// is an answer (the fence is absent); any other failure leaves it unknown.
func (c *Core) ReadFence(ctx context.Context, ns string) (Fence, bool, error) {
	np, err := c.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, c.FenceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Fence{}, false, nil
	case err != nil:
		return Fence{}, false, err
	}
	return Fence{UID: np.UID, Generation: np.Generation}, true, nil
}

// EnsureFence returns the fence of ns, creating it if it is absent. The
// policy denies egress to every pod of the namespace.
func (c *Core) EnsureFence(ctx context.Context, ns string) (Fence, error) {
	fence, present, err := c.ReadFence(ctx, ns)
	if err != nil {
		return Fence{}, err
	}
	if present {
		return fence, nil
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: c.FenceName, Namespace: ns, Labels: map[string]string{LabelManagedBy: c.DriverName}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	created, err := c.Kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		fence, present, err = c.ReadFence(ctx, ns)
		if err != nil {
			return Fence{}, err
		}
		if !present {
			return Fence{}, fmt.Errorf("fence %s/%s was created and removed concurrently", ns, c.FenceName)
		}
		return fence, nil
	}
	if err != nil {
		return Fence{}, err
	}
	return Fence{UID: created.UID, Generation: created.Generation}, nil
}
