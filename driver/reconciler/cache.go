package reconciler

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// caches are the informers of one [Reconciler.Run]: the gateway's
// Sandboxes (agent-sandbox's typed informer, label-selected) and the fence
// NetworkPolicies (client-go's, field-selected by name), one pair per
// namespace or one for the whole cluster, keeping only what the reconciler
// reads. No informer resyncs: the reconciler's own resync is the safety
// net. They keep no watch-health state: the package doc says why that is
// safe.
type caches struct {
	core    *core.Core
	cluster bool
	// served are the driver's namespaces, sorted; serves answers for one.
	served []string
	serves map[string]bool
	// sandboxes and fences are keyed by scope: the namespace, or "" for
	// the cluster.
	sandboxes map[string]cache.SharedIndexInformer
	fences    map[string]cache.SharedIndexInformer
	factories []interface {
		StartWithContext(context.Context)
		Shutdown()
	}
	fenceName string
}

func newCaches(cr *core.Core, cluster bool) *caches {
	namespaces := cr.Namespaces
	c := &caches{
		core: cr, cluster: cluster, served: namespaces, serves: map[string]bool{},
		sandboxes: map[string]cache.SharedIndexInformer{}, fences: map[string]cache.SharedIndexInformer{},
		fenceName: cr.FenceName,
	}
	scopes := namespaces
	if cluster {
		scopes = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		c.serves[ns] = true
	}
	selector := cr.Selector()
	for _, scope := range scopes {
		f := externalversions.NewSharedInformerFactoryWithOptions(cr.Sandboxes, 0,
			externalversions.WithNamespace(scope),
			externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		c.factories = append(c.factories, f)
		inf := f.Agents().V1beta1().Sandboxes().Informer()
		// It fails only once the informer has started.
		_ = inf.SetTransform(c.unserved(core.Lean))
		c.sandboxes[scope] = inf
		byName := fields.OneTermEqualSelector("metadata.name", c.fenceName).String()
		kf := informers.NewSharedInformerFactoryWithOptions(cr.Kube, 0, informers.WithNamespace(scope),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = byName }))
		c.factories = append(c.factories, kf)
		fences := kf.Networking().V1().NetworkPolicies().Informer()
		_ = fences.SetTransform(c.unserved(leanFence))
		c.fences[scope] = fences
	}
	return c
}

// scope returns the scope that covers ns.
func (c *caches) scope(ns string) string {
	if c.cluster {
		return metav1.NamespaceAll
	}
	return ns
}

// unserved returns a transform that keeps of an object in a namespace the
// driver does not serve, which a cluster-wide watch also sees, only its
// key, and passes the rest to lean.
func (c *caches) unserved(lean cache.TransformFunc) cache.TransformFunc {
	return func(o any) (any, error) {
		if m, ok := o.(metav1.Object); ok && !c.serves[m.GetNamespace()] {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
				Namespace: m.GetNamespace(), Name: m.GetName(), ResourceVersion: m.GetResourceVersion(),
			}}, nil
		}
		return lean(o)
	}
}

// leanFence keeps of a fence only what identifies it: the reconciler
// reads its uid and generation.
func leanFence(o any) (any, error) {
	np, ok := o.(*networkingv1.NetworkPolicy)
	if !ok {
		return o, nil
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
		Namespace: np.Namespace, Name: np.Name, UID: np.UID, Generation: np.Generation, ResourceVersion: np.ResourceVersion,
	}}, nil
}

// start runs every informer until ctx is done and waits for their caches
// to sync; it returns ctx's error if they never did.
func (c *caches) start(ctx context.Context) error {
	var synced []cache.InformerSynced
	for scope := range c.fences {
		synced = append(synced, c.fences[scope].HasSynced, c.sandboxes[scope].HasSynced)
	}
	for _, f := range c.factories {
		f.StartWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	return nil
}

// shutdown waits for the informers to stop after their context ended.
func (c *caches) shutdown() {
	for _, f := range c.factories {
		f.Shutdown()
	}
}

// fence returns what the cache says of ns's fence. Run starts no worker
// before the caches have synced, so absent is the API server's word, which
// decideFresh checks again before a suspension.
func (c *caches) fence(ns string) liveFence {
	// client-go's stores never fail a GetByKey.
	o, _, _ := c.fences[c.scope(ns)].GetStore().GetByKey(ns + "/" + c.fenceName)
	if np, ok := o.(*networkingv1.NetworkPolicy); ok {
		return liveFence{known: true, present: true, fence: core.Fence{UID: np.UID, Generation: np.Generation}}
	}
	return liveFence{known: true}
}

// sandbox returns the cached sandbox named by key, if the driver serves
// its namespace.
func (c *caches) sandbox(key types.NamespacedName) (core.Sandbox, bool) {
	if !c.serves[key.Namespace] {
		return core.Sandbox{}, false
	}
	o, ok, err := c.sandboxes[c.scope(key.Namespace)].GetStore().GetByKey(key.String())
	if err != nil || !ok {
		return core.Sandbox{}, false
	}
	return core.View(o)
}

// keys returns the keys of ns's cached sandboxes.
func (c *caches) keys(ns string) []types.NamespacedName {
	if !c.serves[ns] {
		return nil
	}
	keys, _ := c.sandboxes[c.scope(ns)].GetIndexer().IndexKeys(cache.NamespaceIndex, ns)
	out := make([]types.NamespacedName, 0, len(keys))
	for _, k := range keys {
		if key, ok := split(k); ok {
			out = append(out, key)
		}
	}
	return out
}

// keyOf returns the work queue key of an informer object, tombstones
// included.
func keyOf(o any) (types.NamespacedName, bool) {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
	if err != nil {
		return types.NamespacedName{}, false
	}
	return split(k)
}

// split returns the work queue key of a store key; a sandbox's has a
// namespace.
func split(k string) (types.NamespacedName, bool) {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	return types.NamespacedName{Namespace: ns, Name: name}, err == nil && ns != "" && name != ""
}
