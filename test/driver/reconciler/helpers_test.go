package reconciler_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

const staleWarning = "namespace workload fence generation changed; suspending stale boundary"

func TestMain(m *testing.M) {
	rig.Main(m)
}

func newReconciler(t testing.TB, d *driver.Driver, opts ...reconciler.Option) *reconciler.Reconciler {
	t.Helper()
	r, err := reconciler.New(d, opts...)
	require.NoError(t, err)
	return r
}

// observer is a reconciler.Observer of functions; a nil one is skipped.
// It is called concurrently from Run's workers: the functions must be
// safe for that.
type observer struct {
	pass   func(reconciler.PassStats)
	action func(reconciler.ActionEvent)
}

func (o *observer) ObservePass(s reconciler.PassStats) {
	if o.pass != nil {
		o.pass(s)
	}
}

func (o *observer) ObserveAction(e reconciler.ActionEvent) {
	if o.action != nil {
		o.action(e)
	}
}
