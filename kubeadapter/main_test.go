package kubeadapter_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests against a real API server are in the untagged module
// test/kubeadapter, so that kubeadapter's go.mod requires no test rig.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
