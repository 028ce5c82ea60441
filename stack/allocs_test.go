package stack_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// maxExtraAllocs is what the stack may allocate per successful request
// beyond a bare request with the caller's own deadline, over a transport
// that answers at once (transporttest.Answerer). docs/measured.md's cost table shows
// the figure `make bench` measures on the wire.
const maxExtraAllocs = 7

// TestAllocs holds the stack to its price: a successful request through it
// allocates at most maxExtraAllocs more than a bare one with the caller's
// deadline. Naming a connection (roundtrip.KeyOf) cost nine allocations per
// attempt when pooltrace did it for every attempt, not only failed ones.
func TestAllocs(t *testing.T) {
	a := transporttest.NewAnswerer(t)
	bare := transporttest.AllocsPerRequest(t, a, true)
	tests := []struct {
		name string
		give transport.Middleware
	}{
		{"pooltrace over timeout", transport.Chain(pooltrace.New(), timeout.New(30*time.Second))},
		{"retry over pooltrace over timeout", stack.New(30 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := transporttest.AllocsPerRequest(t, tt.give(a), false)
			t.Logf("bare %v, stack %v allocations per request", bare, got)
			require.LessOrEqual(t, got, bare+maxExtraAllocs, "bare %v, stack %v allocations per request", bare, got)
		})
	}
}
