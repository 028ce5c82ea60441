package probe_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, &env)
}

// build builds the kubewire command into a directory of t, with the race
// detector if this test binary has it: the command then shares every
// compiled package with the test, where a build without it would compile
// client-go a second time on a cold machine.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubewire")
	args := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	// From the command's own directory, so that the build selects the
	// command's versions (its go.mod's, or the workspace's), not this
	// module's, which stays at client-go's oldest release; a matrix leg's
	// GOFLAGS (-modfile) is this module's too.
	cmd := exec.Command("go", append([]string{"-C", filepath.Join("..", "..", "cmd", "kubewire")}, append(args, ".")...)...)
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building kubewire: %s", out)
	return bin
}

// TestProbeCluster probes a real API server through a kubeconfig.
func TestProbeCluster(t *testing.T) {
	cfg := env.Config(t)
	bin := build(t)
	path := kubetest.WriteKubeconfig(t, cfg)
	cmd := exec.Command(bin, "probe", "-kubeconfig", path, "-gaps", "0s,200ms", "-json")
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	var rep struct {
		Mode, Server string
		Rows         []struct {
			Client, Outcome string
			Reused          bool
		}
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, "cluster from "+path, rep.Mode)
	require.Len(t, rep.Rows, 4)
	for _, r := range rep.Rows {
		assert.Equal(t, "ok", r.Outcome)
		assert.True(t, r.Reused, "the warm-up left a connection in the pool")
	}
}
