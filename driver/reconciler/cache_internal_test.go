package reconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

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
