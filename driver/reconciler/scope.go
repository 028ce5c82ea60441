package reconciler

import (
	"context"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// clusterThreshold is how many namespaces make Run watch the whole
// cluster, when the API server allows it. Below it the watches per
// namespace cost little and need no ClusterRole; from it on, a gateway's
// watches and caches no longer grow with its namespaces.
const clusterThreshold = 10

// clusterScope decides whether Run watches the whole cluster: from
// clusterThreshold namespaces on, when the API server says that this
// client may list and watch sandboxes and network policies in every
// namespace (a SelfSubjectAccessReview each).
func (r *Reconciler) clusterScope(ctx context.Context) bool {
	n := len(r.core.Namespaces)
	switch {
	case r.cluster != nil:
		return *r.cluster
	case n < clusterThreshold:
		return false
	}
	for _, res := range []authorizationv1.ResourceAttributes{
		{Group: sandboxv1beta1.GroupVersion.Group, Resource: "sandboxes"},
		{Group: "networking.k8s.io", Resource: "networkpolicies"},
	} {
		for _, verb := range []string{"list", "watch"} {
			res.Verb = verb
			review, err := r.core.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
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
