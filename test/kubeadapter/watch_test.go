package kubeadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
)

// TestRawWatchSurvivesTimeout: a plain client-go watch through the stack
// keeps delivering events for several timeouts; under rest.Config.Timeout
// of the same length its result channel closes after about one Timeout.
func TestRawWatchSurvivesTimeout(t *testing.T) {
	admin := env.Config(t)
	cs, err := kubernetes.NewForConfig(admin)
	require.NoError(t, err)
	ns := namespace(t, cs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "rw-"}}, metav1.CreateOptions{})
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	// watch counts events until the result channel closes or 3.5s pass,
	// and reports whether it closed.
	watch := func(cfg *rest.Config) (events int, closed bool) {
		c, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		defer w.Stop()
		deadline := time.After(3500 * time.Millisecond)
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					return events, true
				}
				events++
			case <-deadline:
				return events, false
			}
		}
	}

	plain := rest.CopyConfig(admin)
	plain.Timeout = time.Second
	// Closed before the 3.5s the watch is given: the 1s timeout cut it.
	_, closed := watch(plain)
	assert.True(t, closed, "rest.Config.Timeout cuts the watch")

	applied := rest.CopyConfig(admin)
	applied.Timeout = time.Second
	require.NoError(t, kubeadapter.Apply(applied))
	events, closed := watch(applied)
	assert.False(t, closed, "the watch outlived three timeouts")
	assert.GreaterOrEqual(t, events, 10, "and kept delivering events")
}
