package reconciler

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal"
)

// core is what the reconciler uses of a driver beyond its public API;
// package driver implements it and hands it over through package internal.
type core interface {
	Logger() logr.Logger
	Clients() (versioned.Interface, kubernetes.Interface)
	Selector() string
	FenceName() string
	Version(ctx context.Context) (string, error)
	View(o any) (driver.Sandbox, bool)
	Lean(o any) (any, error)
	ReadFence(ctx context.Context, ns string) (driver.Fence, bool, error)
	List(ctx context.Context, ns string) ([]driver.Sandbox, error)
	Patch(ctx context.Context, s *driver.Sandbox, decide func(driver.Sandbox) internal.Change) (driver.Sandbox, error)
	Warn(s driver.Sandbox, reason, action, note string) bool
	Error(op, ns, name string, err error) error
}

func coreOf(d *driver.Driver) (core, error) {
	c, ok := internal.Core(d).(core)
	if !ok {
		return nil, errors.New("reconciler: bug: package driver does not implement the reconciler's core")
	}
	return c, nil
}
