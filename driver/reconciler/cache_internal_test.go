package reconciler

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestInitialEventsEnd: a watch-list's fences are known only once the
// reflector has taken the bookmark that ends the initial state, not with
// the first event.
func TestInitialEventsEnd(t *testing.T) {
	fw := watch.NewFake()
	var known atomic.Int32
	ended := make(chan struct{})
	w := observe(fw, func(e watch.Event) {
		if initialEventsEnd(e) {
			known.Add(1)
		}
	}, func() { close(ended) })
	go func() {
		fw.Add(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "fence"}})
		fw.Action(watch.Bookmark, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}})
		fw.Action(watch.Bookmark, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: "8", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}})
		fw.Stop()
	}()
	var seen []int32
	for range w.ResultChan() {
		seen = append(seen, known.Load())
	}
	<-ended
	require.Len(t, seen, 3)
	assert.Equal(t, []int32{0, 0}, seen[:2], "nothing known while the reflector takes the initial state")
	assert.Equal(t, int32(1), known.Load(), "known once the reflector has the bookmark that ends it")
}

// TestKeyOf: a key for an object, a tombstone with its object, and a
// tombstone without, which has only its key; nothing for anything else.
func TestKeyOf(t *testing.T) {
	want := types.NamespacedName{Namespace: "a", Name: "sb"}
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "sb"}}
	for _, o := range []any{obj, cache.DeletedFinalStateUnknown{Key: "a/sb", Obj: obj}, cache.DeletedFinalStateUnknown{Key: "a/sb"}} {
		got, ok := keyOf(o)
		assert.True(t, ok, "%#v", o)
		assert.Equal(t, want, got, "%#v", o)
	}
	for _, o := range []any{nil, "a/sb", cache.DeletedFinalStateUnknown{Key: ""}, cache.DeletedFinalStateUnknown{Key: "sb"},
		cache.DeletedFinalStateUnknown{Key: "/sb"}, cache.DeletedFinalStateUnknown{Key: "a/b/c"}} {
		_, ok := keyOf(o)
		assert.False(t, ok, "%#v", o)
	}
}
