package soak_test

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/driver/soak"
)

// soakConfig is TestSoak's run: 30 seconds with a fixed seed unless the
// -soak.* flags say otherwise (`make soak` runs ten minutes).
var soakConfig = soak.DefaultConfig()

func init() { soakConfig.RegisterFlags(flag.CommandLine) }

// gateway is examples/gateway with the timeouts a gateway facing these
// faults would choose: a 5s timeout per attempt instead of 30s, and an
// HTTP/2 health check that finds a dead connection in about 4s instead
// of 45s.
var gateway = soak.Process("-api-timeout", "5s", "-api-ping-after", "2s", "-api-ping-timeout", "2s")

// TestSoak runs examples/gateway, its driver and reconciler under mixed
// connection faults and an API server restart, and fails on any write
// executed twice that is not marked idempotent, any acknowledged operation
// the API server's audit log or the final state contradicts, any sandbox
// whose final state the history does not imply, any growth of the
// gateway's goroutines, open files or heap, and an unclean exit.
func TestSoak(t *testing.T) {
	rep := soak.Run(t, soakConfig, gateway)
	assert.False(t, rep.Failed(), "the soak broke a rule; see the report above")
	assert.NotZero(t, rep.Result.ByKind[soak.Create][soak.OK], "no sandbox was ever created")
}

// TestSoakCatchesDuplicates runs the gateway over a deliberately broken
// hop to the API server, one that sends every POST twice: the checker
// must report the duplicated creates, and never as marked idempotent.
func TestSoakCatchesDuplicates(t *testing.T) {
	c := soak.DefaultConfig()
	c.Duration = 10 * time.Second
	c.Rates = map[string]float64{}
	c.Restart, c.FenceChanges = false, 0
	c.Kinds = []soak.Kind{soak.Create, soak.Delete}
	c.ResendPOST = true
	if soakConfig.Out != "" {
		c.Out = soakConfig.Out + "-duplicates"
	}
	rep := soak.Run(t, c, gateway)
	require.NotZero(t, rep.Resent, "the broken hop never re-sent a POST")
	assert.NotZero(t, rep.Result.DuplicateCreates, "the checker missed the re-sent creates")
	assert.True(t, rep.Result.Failed())
	for _, d := range rep.Result.Duplicates {
		if d.Verb == "create" {
			assert.False(t, d.Idempotent)
		}
	}
}
