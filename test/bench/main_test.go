package bench_test

import (
	"testing"

	"github.com/kubewire/kubewire/test/kubetest"
)

// TestMain starts no API server: the client-go benchmarks take one from
// kubetest.Shared, so that the others run on a quiet machine.
func TestMain(m *testing.M) {
	kubetest.Main(m, nil)
}
