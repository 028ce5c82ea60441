package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	"sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/kubewire/kubewire/driver"
)

// caches are the informers of one [Reconciler.Run]: the gateway's
// Sandboxes (agent-sandbox's typed informer, label-selected) and the fence
// NetworkPolicies (field-selected by name), either one pair per namespace
// or one pair for the whole cluster, filtered to the served namespaces.
// Both keep only what the reconciler reads. No informer resyncs; the
// reconciler's own jittered resync is the safety net.
type caches struct {
	core    core
	cluster bool
	// served are the driver's namespaces, sorted; serves answers for one.
	served []string
	serves map[string]bool
	// sandboxes and fences are keyed by scope: the namespace, or "" for
	// the cluster.
	sandboxes map[string]cache.SharedIndexInformer
	fences    map[string]cache.SharedIndexInformer
	factories []externalversions.SharedInformerFactory
	fenceName string
	// running counts the fence informers' goroutines.
	running sync.WaitGroup

	mu sync.Mutex
	// fenceErr holds, per scope, why the fences are unknown: the fence
	// informer's list or watch failed, or its watch ended and it has not
	// listed or watched again. While it is set nothing is decided from
	// them, whatever the cache still holds.
	fenceErr map[string]error
	// calls numbers, per scope, the fence informer's lists and watches, so
	// that a stopped watch's late word does not undo a newer call's.
	calls map[string]uint64
	// known is called for each namespace whose fence becomes known again.
	known func(ns string)
}

func newCaches(cr core, version string, namespaces []string, cluster bool) *caches {
	c := &caches{
		core: cr, cluster: cluster, served: namespaces, serves: map[string]bool{},
		sandboxes: map[string]cache.SharedIndexInformer{}, fences: map[string]cache.SharedIndexInformer{},
		fenceName: cr.FenceName(), fenceErr: map[string]error{}, calls: map[string]uint64{},
	}
	scopes := namespaces
	if cluster {
		scopes = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		c.serves[ns] = true
	}
	sandboxCS, _ := cr.Clients()
	selector := cr.Selector()
	for _, scope := range scopes {
		f := externalversions.NewSharedInformerFactoryWithOptions(sandboxCS, 0,
			externalversions.WithNamespace(scope),
			externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		c.factories = append(c.factories, f)
		var inf cache.SharedIndexInformer
		if version == sandboxv1alpha1.GroupVersion.Version {
			inf = f.Agents().V1alpha1().Sandboxes().Informer()
		} else {
			inf = f.Agents().V1beta1().Sandboxes().Informer()
		}
		// It fails only once the informer has started.
		_ = inf.SetTransform(c.unserved(cr.Lean))
		c.sandboxes[scope] = inf
		c.fences[scope] = c.fenceInformer(scope)
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

// fenceInformer watches the fence policies of scope. Its list and watch
// record their outcome, so that a scope whose fence watch broke is unknown
// until the informer has listed or watched again.
func (c *caches) fenceInformer(scope string) cache.SharedIndexInformer {
	_, kube := c.core.Clients()
	policies := kube.NetworkingV1().NetworkPolicies(scope)
	byName := fields.OneTermEqualSelector("metadata.name", c.fenceName).String()
	// The fences are known once a list has its last page, or a watch that
	// sends the initial state (client-go's watch-list) has sent all of
	// it; a watch that resumes from a resourceVersion is known at once.
	// The informer's indexer takes a re-listed state a moment later: until
	// then a worker may read the state before the break, which cannot
	// suspend a sandbox wrongly (an absent fence or another uid is read
	// again from the API server; an older generation decides nothing),
	// and the replace queues the namespace again.
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			call := c.call(scope)
			l, err := policies.List(ctx, o)
			switch {
			case err != nil:
				c.setFenceErr(scope, call, err)
			case l.Continue == "":
				c.setFenceErr(scope, call, nil)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			initial := o.SendInitialEvents != nil && *o.SendInitialEvents
			call := c.call(scope)
			w, err := policies.Watch(ctx, o)
			if err != nil || !initial {
				c.setFenceErr(scope, call, err)
			}
			if err != nil {
				return nil, err
			}
			return observe(w, func(e watch.Event) {
				if initial && initialEventsEnd(e) {
					c.setFenceErr(scope, call, nil)
				}
			}, func() { c.setFenceErr(scope, call, errWatchEnded) }), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &networkingv1.NetworkPolicy{}, 0, cache.Indexers{})
	_ = inf.SetTransform(c.unserved(leanFence))
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		where := scope
		if where == metav1.NamespaceAll {
			where = "every namespace"
		}
		c.setFenceErr(scope, c.latest(scope), fmt.Errorf("fences %s of %s: watch: %w", c.fenceName, where, err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return inf
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

var errWatchEnded = errors.New("the fence watch ended; waiting for the informer to list or watch again")

// call numbers a new list or watch of scope's fences.
func (c *caches) call(scope string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[scope]++
	return c.calls[scope]
}

// latest is the number of scope's last list or watch.
func (c *caches) latest(scope string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[scope]
}

// setFenceErr records what call learnt of scope's fences, unless a newer
// list or watch has begun since.
func (c *caches) setFenceErr(scope string, call uint64, err error) {
	c.mu.Lock()
	if c.calls[scope] != call {
		c.mu.Unlock()
		return
	}
	_, was := c.fenceErr[scope]
	if err != nil {
		c.fenceErr[scope] = err
	} else {
		delete(c.fenceErr, scope)
	}
	known := c.known
	c.mu.Unlock()
	if !was || err != nil || known == nil {
		return
	}
	if !c.cluster {
		known(scope)
		return
	}
	for _, ns := range c.served {
		known(ns)
	}
}

// observed is a watch that calls delivered with each event the reflector
// has taken, and ended once its result channel closes, for whatever
// reason: a timeout, a broken connection, or Stop.
type observed struct {
	watch.Interface
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
}

func observe(w watch.Interface, delivered func(watch.Event), ended func()) watch.Interface {
	o := &observed{Interface: w, ch: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.ch)
		defer ended()
		for e := range w.ResultChan() {
			select {
			case o.ch <- e:
				delivered(e)
			case <-o.stop:
				return
			}
		}
	}()
	return o
}

// initialEventsEnd reports whether e is the bookmark that ends a
// watch-list's initial state.
func initialEventsEnd(e watch.Event) bool {
	if e.Type != watch.Bookmark {
		return false
	}
	m, err := meta.Accessor(e.Object)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

func (o *observed) ResultChan() <-chan watch.Event { return o.ch }

func (o *observed) Stop() {
	o.once.Do(func() { close(o.stop) })
	o.Interface.Stop()
}

// start runs every informer until ctx is done and waits for their caches
// to sync; it returns ctx's error if they never did.
func (c *caches) start(ctx context.Context) error {
	var synced []cache.InformerSynced
	for scope := range c.fences {
		inf := c.fences[scope]
		c.running.Go(func() { inf.RunWithContext(ctx) })
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
	c.running.Wait()
}

// fence returns what the cache knows of ns's fence. Absent means the API
// server said so: the policy was never listed, or a delete was observed.
func (c *caches) fence(ns string) (LiveFence, error) {
	scope := c.scope(ns)
	c.mu.Lock()
	err := c.fenceErr[scope]
	c.mu.Unlock()
	if err != nil {
		return LiveFence{}, err
	}
	inf := c.fences[scope]
	if !inf.HasSynced() {
		return LiveFence{}, fmt.Errorf("fence of %s: not synced", ns)
	}
	o, ok, err := inf.GetStore().GetByKey(ns + "/" + c.fenceName)
	if err != nil {
		return LiveFence{}, err
	}
	if np, isPolicy := o.(*networkingv1.NetworkPolicy); ok && isPolicy {
		return LiveFence{Known: true, Present: true, Fence: driver.Fence{UID: np.UID, Generation: np.Generation}}, nil
	}
	return LiveFence{Known: true}, nil
}

// sandbox returns the cached sandbox named by key, if the driver serves
// its namespace.
func (c *caches) sandbox(key types.NamespacedName) (driver.Sandbox, bool) {
	if !c.serves[key.Namespace] {
		return driver.Sandbox{}, false
	}
	o, ok, err := c.sandboxes[c.scope(key.Namespace)].GetStore().GetByKey(key.String())
	if err != nil || !ok {
		return driver.Sandbox{}, false
	}
	return c.core.View(o)
}

// keys returns the keys of ns's cached sandboxes.
func (c *caches) keys(ns string) []types.NamespacedName {
	if !c.serves[ns] {
		return nil
	}
	objs, _ := c.sandboxes[c.scope(ns)].GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	out := make([]types.NamespacedName, 0, len(objs))
	for _, o := range objs {
		if key, ok := keyOf(o); ok {
			out = append(out, key)
		}
	}
	return out
}

// keyOf returns the workqueue key of an informer object, tombstones
// included.
func keyOf(o any) (types.NamespacedName, bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		if _, ok := t.Obj.(metav1.Object); !ok {
			// A tombstone without its object still has its key.
			ns, name, err := cache.SplitMetaNamespaceKey(t.Key)
			return types.NamespacedName{Namespace: ns, Name: name}, err == nil && ns != "" && name != ""
		}
		o = t.Obj
	}
	m, ok := o.(metav1.Object)
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}, true
}
