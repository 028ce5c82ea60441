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
