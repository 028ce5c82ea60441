package probe_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, &env)
}

// build builds the kubewire command into a directory of t
// (kubetest.BuildCommand).
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubewire")
	require.NoError(t, kubetest.BuildCommand(filepath.Join("..", "..", "cmd", "kubewire"), bin))
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
