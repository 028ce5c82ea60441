package reconciler

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Scope is which watches Run opens.
type Scope int

const (
	// ScopeAuto watches the whole cluster when the driver serves at least
	// [DefaultClusterThreshold] namespaces and the API server says that
	// this client may list and watch sandboxes and network policies in
	// every namespace (a SelfSubjectAccessReview each); otherwise each
	// namespace.
	ScopeAuto Scope = iota
	// ScopeNamespaced opens one Sandbox watch and one fence watch per
	// namespace. It needs only namespaced RBAC: a Role in each namespace.
	ScopeNamespaced
	// ScopeCluster opens one Sandbox watch and one fence watch for the
	// whole gateway, label- and field-selected. Of the objects it sees in
	// namespaces the driver does not serve (sandboxes of the gateway's
	// label, fences of the same name) it keeps only their keys. It needs
	// a ClusterRole for list and watch.
	ScopeCluster
)

func (s Scope) String() string {
	switch s {
	case ScopeAuto:
		return "auto"
	case ScopeNamespaced:
		return "namespaced"
	case ScopeCluster:
		return "cluster"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// DefaultClusterThreshold is how many namespaces make [ScopeAuto] watch
// the whole cluster. Below it the watches per namespace cost little and
// need no ClusterRole; from it on, a gateway's watches and caches no
// longer grow with its namespaces.
const DefaultClusterThreshold = 10

// WithScope sets which watches Run opens. Default: [ScopeAuto]. Must be
// one of the Scope constants.
func WithScope(s Scope) Option {
	return optionFunc(func(c *config) error {
		if s < ScopeAuto || s > ScopeCluster {
			return fmt.Errorf("reconciler: WithScope must be ScopeAuto, ScopeNamespaced or ScopeCluster, got %v", s)
		}
		c.scope = s
		return nil
	})
}

// clusterScope decides whether Run watches the whole cluster.
func (r *Reconciler) clusterScope(ctx context.Context) bool {
	n := len(r.driver.Namespaces())
	switch {
	case r.scope == ScopeCluster:
		return true
	case r.scope == ScopeNamespaced, n < DefaultClusterThreshold:
		return false
	}
	_, kube := r.core.Clients()
	for _, res := range []authorizationv1.ResourceAttributes{
		{Group: sandboxv1beta1.GroupVersion.Group, Resource: "sandboxes"},
		{Group: "networking.k8s.io", Resource: "networkpolicies"},
	} {
		for _, verb := range []string{"list", "watch"} {
			res.Verb = verb
			review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
				&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &res}}, metav1.CreateOptions{})
			if err != nil {
				r.log.Error(err, "watching each namespace: could not ask whether this client may watch the whole cluster",
					"namespaces", n, "verb", verb, "group", res.Group, "resource", res.Resource)
				return false
			}
			if !review.Status.Allowed {
				r.log.Info("watching each namespace: this client may not watch the whole cluster",
					"namespaces", n, "verb", verb, "group", res.Group, "resource", res.Resource, "reason", review.Status.Reason)
				return false
			}
		}
	}
	r.log.V(1).Info("watching the whole cluster", "namespaces", n)
	return true
}
