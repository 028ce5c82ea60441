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

	// DefaultEventQPS and DefaultEventBurst are the event limit, the
	// kubelet's eventRecordQPS and eventBurst.
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

// WithEventLimit bounds the driver's Events to qps per second with bursts
// of burst. Default: [DefaultEventQPS], [DefaultEventBurst]. Events are
// written by client-go's events broadcaster through a client of their own
// with that QPS and Burst, as the kubelet's are. Events are best effort,
// as in Kubernetes: one over the limit is dropped, not queued, so that the
// Events written go out within moments of the writes they explain, and
// those of a fence change over many sandboxes do not slow its suspensions
// down; the reconciler's warning log line stays for every one, and its
// observer counts the drops (drivermetrics'
// kubewire_reconciler_events_dropped_total). A qps of rate.Inf (or +Inf)
// removes the bound. qps must be positive and burst at least 1.
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
