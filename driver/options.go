package driver

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubewire/kubewire/driver/internal"
	"github.com/kubewire/kubewire/kubeadapter"
)

// Defaults.
const (
	DefaultDriverName = "kubewire-driver"
	DefaultFenceName  = "sandbox-workload-fence"
	DefaultPageSize   = 500

	// DefaultEventQPS and DefaultEventBurst bound the rate of Event
	// writes, as the kubelet's eventRecordQPS and eventBurst do; they are
	// the reconciler's default write limit too, so that at its default a
	// fence change's Events keep up with its suspensions.
	DefaultEventQPS   = 50
	DefaultEventBurst = 100
)

// Option configures [New].
type Option interface {
	apply(*options) error
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	driverName string
	fenceName  string
	pageSize   int64
	logger     logr.Logger
	adapter    []kubeadapter.Option
	eventQPS   float64
	eventBurst int
}

func defaultOptions() options {
	return options{driverName: DefaultDriverName, fenceName: DefaultFenceName, pageSize: DefaultPageSize, logger: logr.Discard(),
		eventQPS: DefaultEventQPS, eventBurst: DefaultEventBurst}
}

// WithDriverName sets the value of the app.kubernetes.io/managed-by label
// and the reporting controller of the driver's Events. Default:
// [DefaultDriverName]. Must be a valid label value.
func WithDriverName(name string) Option {
	return optionFunc(func(o *options) error {
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
			return fmt.Errorf("driver: WithDriverName %q is not a valid label value", name)
		}
		o.driverName = name
		return nil
	})
}

// WithFenceName sets the name of each namespace's fence NetworkPolicy.
// Default: [DefaultFenceName]. Must be a DNS subdomain.
func WithFenceName(name string) Option {
	return optionFunc(func(o *options) error {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("driver: WithFenceName %q is not a valid object name", name)
		}
		o.fenceName = name
		return nil
	})
}

// WithPageSize sets the page size of list calls. Default:
// [DefaultPageSize]. Must be positive.
func WithPageSize(n int64) Option {
	return optionFunc(func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("driver: WithPageSize must be positive, got %d", n)
		}
		o.pageSize = n
		return nil
	})
}

// WithEventLimit bounds the rate of the driver's Event writes to qps per
// second with bursts of burst. Default: [DefaultEventQPS],
// [DefaultEventBurst]. Events beyond it wait and are handed to
// client-go's recorder later, in the order recorded; it writes them
// concurrently, and drops one it cannot write. They also wait while a
// sandbox write of the driver is in flight (see Events in the package
// doc). A qps of rate.Inf (or +Inf) removes the bound. qps must be
// positive and burst at least 1.
//
// client-go's recorder holds at most 1,000 Events it has not yet written
// and drops the rest: a limit far above the rate at which the API server
// takes Events loses some in a burst.
//
// Events share the API server with the writes they explain: unbounded, a
// fence change over n sandboxes sends n Event creates beside the n
// suspensions, and they slow the suspensions down.
func WithEventLimit(qps float64, burst int) Option {
	return optionFunc(func(o *options) error {
		limit, err := internal.Limit("driver: WithEventLimit", qps, burst)
		if err != nil {
			return err
		}
		o.eventQPS, o.eventBurst = limit, burst
		return nil
	})
}

// WithLogger sets the driver's logger; the kubewire stack under it logs
// there too. Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(o *options) error {
		o.logger = l
		return nil
	})
}

// WithAdapterOptions passes options to kubeadapter.Apply, for example
// kubeadapter.WithTimeout. Default: kubeadapter's. [New] refuses them for
// a config that already carries the stack (kubeadapter.Applied), whose
// own options would stay in force.
func WithAdapterOptions(opts ...kubeadapter.Option) Option {
	return optionFunc(func(o *options) error {
		o.adapter = append(o.adapter, opts...)
		return kubeadapter.Check(opts...)
	})
}
