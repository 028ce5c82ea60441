package probe_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/kubetest"
)

var (
	env *kubetest.Env
	// bin is the kubewire command, built by TestMain.
	bin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubewire-probe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "kubewire")
	build := exec.Command("go", "build", "-o", bin, "github.com/kubewire/kubewire/cmd/kubewire")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kubewire:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	kubetest.Main(m, &env)
}

// TestProbeCluster probes a real API server through a kubeconfig.
func TestProbeCluster(t *testing.T) {
	path := kubetest.WriteKubeconfig(t, env.Config(t))
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
