package reconciler

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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
