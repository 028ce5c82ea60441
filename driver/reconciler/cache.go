package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
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

// caches are the informers of one [Reconciler.Run]: per namespace, the
// gateway's Sandboxes (agent-sandbox's typed informer, label-selected) and
// the fence NetworkPolicy (field-selected by name). No informer resyncs;
// the reconciler's own jittered resync is the safety net.
type caches struct {
	core      core
	sandboxes map[string]cache.SharedIndexInformer
	fences    map[string]cache.SharedIndexInformer
	factories []externalversions.SharedInformerFactory

	mu sync.Mutex
	// fenceErr holds, per namespace, why the fence is unknown: the fence
	// informer's list or watch failed, or its watch ended and it has not
	// listed or watched again. While it is set nothing is decided from the
	// fence, whatever the cache still holds.
	fenceErr map[string]error
	// known is called when a namespace's fence becomes known again.
	known func(ns string)
}

func newCaches(cr core, version string, namespaces []string) *caches {
	c := &caches{core: cr, sandboxes: map[string]cache.SharedIndexInformer{}, fences: map[string]cache.SharedIndexInformer{}, fenceErr: map[string]error{}}
	sandboxCS, _ := cr.Clients()
	selector := cr.Selector()
	for _, ns := range namespaces {
		f := externalversions.NewSharedInformerFactoryWithOptions(sandboxCS, 0,
			externalversions.WithNamespace(ns),
			externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		c.factories = append(c.factories, f)
		if version == sandboxv1alpha1.GroupVersion.Version {
			c.sandboxes[ns] = f.Agents().V1alpha1().Sandboxes().Informer()
		} else {
			c.sandboxes[ns] = f.Agents().V1beta1().Sandboxes().Informer()
		}
		c.fences[ns] = c.fenceInformer(ns)
	}
	return c
}

// fenceInformer watches the one fence policy of ns. Its list and watch
// record their outcome, so that a namespace whose fence watch broke is
// unknown until the informer has listed or watched again.
func (c *caches) fenceInformer(ns string) cache.SharedIndexInformer {
	_, kube := c.core.Clients()
	policies := kube.NetworkingV1().NetworkPolicies(ns)
	fenceName := c.core.FenceName()
	byName := fields.OneTermEqualSelector("metadata.name", fenceName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			l, err := policies.List(ctx, o)
			c.setFenceErr(ns, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			w, err := policies.Watch(ctx, o)
			c.setFenceErr(ns, err)
			if err != nil {
				return nil, err
			}
			return observe(w, func() { c.setFenceErr(ns, errWatchEnded) }), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &networkingv1.NetworkPolicy{}, 0, cache.Indexers{})
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		c.setFenceErr(ns, fmt.Errorf("fence %s/%s: watch: %w", ns, fenceName, err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return inf
}

var errWatchEnded = errors.New("the fence watch ended; waiting for the informer to list or watch again")

func (c *caches) setFenceErr(ns string, err error) {
	c.mu.Lock()
	_, was := c.fenceErr[ns]
	if err != nil {
		c.fenceErr[ns] = err
	} else {
		delete(c.fenceErr, ns)
	}
	known := c.known
	c.mu.Unlock()
	if was && err == nil && known != nil {
		known(ns)
	}
}

// observed is a watch that calls ended once its result channel closes,
// for whatever reason: a timeout, a broken connection, or Stop.
type observed struct {
	watch.Interface
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
}

func observe(w watch.Interface, ended func()) watch.Interface {
	o := &observed{Interface: w, ch: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.ch)
		defer ended()
		for e := range w.ResultChan() {
			select {
			case o.ch <- e:
			case <-o.stop:
				return
			}
		}
	}()
	return o
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
	for ns := range c.fences {
		go c.fences[ns].RunWithContext(ctx)
		synced = append(synced, c.fences[ns].HasSynced, c.sandboxes[ns].HasSynced)
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

// fence returns what the cache knows of ns's fence. Absent means the API
// server said so: the policy was never listed, or a delete was observed.
func (c *caches) fence(ns string) (LiveFence, error) {
	c.mu.Lock()
	err := c.fenceErr[ns]
	c.mu.Unlock()
	if err != nil {
		return LiveFence{}, err
	}
	inf := c.fences[ns]
	if !inf.HasSynced() {
		return LiveFence{}, fmt.Errorf("fence of %s: not synced", ns)
	}
	for _, o := range inf.GetStore().List() {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok {
			return LiveFence{Known: true, Present: true, Fence: driver.Fence{UID: np.UID, Generation: np.Generation}}, nil
		}
	}
	return LiveFence{Known: true}, nil
}

// sandbox returns the cached sandbox named by key.
func (c *caches) sandbox(key types.NamespacedName) (driver.Sandbox, bool) {
	inf, ok := c.sandboxes[key.Namespace]
	if !ok {
		return driver.Sandbox{}, false
	}
	o, ok, err := inf.GetStore().GetByKey(key.String())
	if err != nil || !ok {
		return driver.Sandbox{}, false
	}
	return c.core.View(o)
}

// keyOf returns the workqueue key of an informer object, tombstones
// included.
func keyOf(o any) (types.NamespacedName, bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	m, ok := o.(metav1.Object)
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}, true
}
