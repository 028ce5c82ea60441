package tracing_test

import (
	"testing"

	"github.com/kubewire/kubewire/test/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, &env)
}
