package driver_test

import (
	"testing"

	"github.com/kubewire/kubewire/test/driver/internal/drivertest"
)

func TestMain(m *testing.M) {
	drivertest.Main(m)
}
