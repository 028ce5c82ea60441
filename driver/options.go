package driver

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// Option configures [New] and [NewForClients].
type Option interface {
	apply(*core.Settings) error
}

type optionFunc func(*core.Settings) error

func (f optionFunc) apply(s *core.Settings) error { return f(s) }

// defaults: the event limit keeps the kubelet's eventBurst, at a fifth of
// its eventRecordQPS (see WithEventLimit).
func defaults() core.Settings {
	return core.Settings{DriverName: "kubewire-driver", FenceName: "sandbox-workload-fence", Log: logr.Discard(),
		EventQPS: 10, EventBurst: 100}
}

// WithDriverName sets the value of the app.kubernetes.io/managed-by label
// and the reporting controller of the driver's Events. Default:
// kubewire-driver. Must be a valid label value.
func WithDriverName(name string) Option {
	return optionFunc(func(s *core.Settings) error {
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
			return fmt.Errorf("driver: WithDriverName %q is not a valid label value", name)
		}
		s.DriverName = name
		return nil
	})
}

// WithFenceName sets the name of each namespace's fence NetworkPolicy.
// Default: sandbox-workload-fence. Must be a DNS subdomain.
func WithFenceName(name string) Option {
	return optionFunc(func(s *core.Settings) error {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("driver: WithFenceName %q is not a valid object name", name)
		}
		s.FenceName = name
		return nil
	})
}

// WithEventLimit bounds the driver's Events to qps per second with bursts
// of burst. Default: 10 per second, bursts of 100. The kubelet allows 50 a
// second for the hundred-odd pods of a node; a gateway's suspensions come
// thousands at a time after a fence change, and every Event written is a
// write beside them: at 10 a second a fence change over 10,000 sandboxes
// writes about 430 (BenchmarkFenceChangeCeiling), at 50 about 1,900.
//
// Events are written by client-go's events broadcaster; with [New],
// through a client of their own with that QPS and Burst, as the kubelet's
// are (with [NewForClients], through the kube clientset given). Events are
// best effort, as in Kubernetes: one over the limit is dropped, not
// queued, so that the Events written go out within moments of the writes
// they explain; the reconciler's warning log line stays for every one, and
// its observer counts the drops (drivermetrics'
// kubewire_reconciler_events_dropped_total). A qps of rate.Inf (or +Inf)
// removes the bound. qps must be positive and burst at least 1.
func WithEventLimit(qps float64, burst int) Option {
	return optionFunc(func(s *core.Settings) error {
		limit, err := core.Limit("driver: WithEventLimit", qps, burst)
		if err != nil {
			return err
		}
		s.EventQPS, s.EventBurst = limit, burst
		return nil
	})
}

// WithLogger sets the driver's logger; the kubewire stack that [New]
// installs logs there too (a stack the config already carries keeps its
// own, kubeadapter.WithLogger). Default: logr.Discard().
func WithLogger(l logr.Logger) Option {
	return optionFunc(func(s *core.Settings) error {
		s.Log = l
		return nil
	})
}
