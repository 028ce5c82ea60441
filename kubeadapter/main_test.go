package kubeadapter_test

import (
	"testing"

	"github.com/kubewire/kubewire/internal/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, &env)
}
