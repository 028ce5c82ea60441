package core

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestEventsOverTheLimitDropped: an Event over the limit is dropped at once,
// not queued; the first drop is logged, and Close logs the rest with their
// count. The two Events within the burst are written.
func TestEventsOverTheLimitDropped(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	kube := fake.NewClientset()
	// A burst of two; the next token comes in eleven days.
	r := newRecorder(kube, "test", rate.NewLimiter(1e-6, 2), log)
	var got []bool
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		got = append(got, r.warn(Sandbox{Namespace: "ns", Name: name}, "StaleFence", "Suspend", "note"))
	}
	assert.Equal(t, []bool{true, true, false, false, false}, got)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := kube.EventsV1().Events("ns").List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		assert.Len(c, l.Items, 2)
	}, 10*time.Second, 10*time.Millisecond)
	r.shutdown()
	r.shutdown()
	assert.False(t, r.warn(Sandbox{Namespace: "ns", Name: "f"}, "StaleFence", "Suspend", "note"), "recorded after Close")
	mu.Lock()
	defer mu.Unlock()
	var dropped []string
	for _, l := range lines {
		if strings.Contains(l, "dropped Events") {
			dropped = append(dropped, l)
		}
	}
	assert.Equal(t, []string{
		`"level"=0 "msg"="dropped Events over the event limit (driver.WithEventLimit); the warnings they carried are in this log" "dropped"=1 "qps"=0.000001 "burst"=2`,
		`"level"=0 "msg"="dropped Events over the event limit (driver.WithEventLimit); the warnings they carried are in this log" "dropped"=2 "qps"=0.000001 "burst"=2`,
	}, dropped, strings.Join(lines, "\n"))
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("x", 1162)
	// A three-byte rune that the cut would split.
	split := strings.Repeat("x", maxNote-4) + "€€"
	tests := []struct {
		give, want string
	}{
		{"", ""},
		{"short", "short"},
		{strings.Repeat("x", maxNote), strings.Repeat("x", maxNote)},
		{long, long[:maxNote-3] + "..."},
		{split, strings.Repeat("x", maxNote-4) + "..."},
	}
	for _, tt := range tests {
		got := truncate(tt.give)
		assert.Equal(t, tt.want, got)
		assert.LessOrEqual(t, len(got), maxNote)
		assert.True(t, utf8.ValidString(got))
	}
}

// TestEventRegarding: an Event refers to the v1beta1 sandbox, with its uid
// and resourceVersion, and carries the reason, the action and the note,
// truncated to what the API accepts.
func TestEventRegarding(t *testing.T) {
	kube := fake.NewClientset()
	r := newRecorder(kube, "kubewire-driver", rate.NewLimiter(rate.Inf, 1), logr.Discard())
	t.Cleanup(r.shutdown)
	s := Sandbox{Namespace: "ns", Name: "sb", UID: "uid-sb", ResourceVersion: "42"}
	require.True(t, r.warn(s, "StaleFence", "Suspend", strings.Repeat("n", 2*maxNote)))
	var got []eventsv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := kube.EventsV1().Events("ns").List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		got = l.Items
		assert.Len(c, got, 1)
	}, 10*time.Second, 10*time.Millisecond)
	e := got[0]
	assert.Equal(t, corev1.ObjectReference{
		Kind: "Sandbox", APIVersion: "agents.x-k8s.io/v1beta1",
		Namespace: "ns", Name: "sb", UID: "uid-sb", ResourceVersion: "42",
	}, e.Regarding)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Equal(t, "StaleFence", e.Reason)
	assert.Equal(t, "Suspend", e.Action)
	assert.Equal(t, "kubewire-driver", e.ReportingController)
	assert.Equal(t, truncate(strings.Repeat("n", 2*maxNote)), e.Note)
}
