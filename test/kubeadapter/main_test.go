package kubeadapter_test

import (
	"testing"

	clientgometrics "k8s.io/client-go/tools/metrics"

	"github.com/kubewire/kubewire/test/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	// Before any client runs: client-go reads the variable on every retry.
	clientgometrics.RequestRetry = clientGoRetries
	kubetest.Main(m, &env)
}
