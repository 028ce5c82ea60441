package driver_test

import (
	"testing"

	"github.com/kubewire/kubewire/test/driver/internal/rig"
)

func TestMain(m *testing.M) {
	rig.Main(m)
}
