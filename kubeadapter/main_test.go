package kubeadapter_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/internal/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	env = kubetest.Start()
	code := m.Run()
	env.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
