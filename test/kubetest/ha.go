package kubetest

import (
	"errors"
	"fmt"
	"time"
)

// Stop is how [Env.StopReplica] and [Env.RestartReplica] stop a
// kube-apiserver replica.
type Stop int

const (
	// Graceful sends SIGTERM and waits for the exit, as a rolling upgrade
	// does: /readyz fails at once, the replica serves for
	// --shutdown-delay-duration, then answers new requests 429 with
	// Retry-After and Connection: close (--shutdown-send-retry-after) until
	// those in flight drain, and exits. It is killed after 20s.
	Graceful Stop = iota
	// Kill sends SIGKILL, as a crash or a lost node does: the kernel
	// closes every connection and the port refuses new ones.
	Kill
)

func (s Stop) String() string {
	switch s {
	case Graceful:
		return "Graceful"
	case Kill:
		return "Kill"
	}
	return fmt.Sprintf("Stop(%d)", int(s))
}

// Defaults of the HA options of [Options].
const (
	// DefaultHealthCheckInterval is [Options.HealthCheckInterval]'s.
	DefaultHealthCheckInterval = time.Second
	// DefaultUnhealthyThreshold is [Options.UnhealthyThreshold]'s.
	DefaultUnhealthyThreshold = 2
	// DefaultHealthyThreshold is [Options.HealthyThreshold]'s.
	DefaultHealthyThreshold = 1
)

// BalancerStats are the counters of the load balancer in front of an HA
// control plane, read at one moment (each counter atomically, not all at
// once).
type BalancerStats struct {
	// Addr is the balancer's address, host:port, the one of every config.
	Addr string
	// Refused counts connections closed at once because every replica was
	// out.
	Refused int64
	// Replicas are indexed as [Env.StopReplica] indexes them.
	Replicas []ReplicaStats
}

// ReplicaStats are the load balancer's counters of one replica.
type ReplicaStats struct {
	// Addr is the replica's own address, host:port.
	Addr string
	// In is whether the balancer sends the replica new connections.
	In bool
	// Conns counts the client connections sent to the replica.
	Conns int64
	// DialErrors counts those of Conns the balancer could not connect to
	// the replica, and so reset.
	DialErrors int64
	// Checks counts the health checks done; ChecksFailed those that
	// failed.
	Checks, ChecksFailed int64
}

// Balancer returns the load balancer's counters; with one replica there
// is no balancer and it returns the zero value.
func (e *Env) Balancer() BalancerStats {
	if e.cp == nil || e.cp.lb == nil {
		return BalancerStats{}
	}
	return e.cp.lb.stats()
}

// StopReplica stops kube-apiserver replica i (from 0) as how says and
// waits for it to exit. The load balancer learns of it only from its
// health checks. The replica stays stopped until [Env.StartReplica];
// [Env.Stop] does not report it.
func (e *Env) StopReplica(i int, how Stop) error {
	if err := e.ready("StopReplica"); err != nil {
		return err
	}
	return e.cp.stopReplica(i, how)
}

// StartReplica starts the stopped kube-apiserver replica i again on the
// same port, etcd, certificates and flags, and returns once it is ready
// and, in an HA control plane, the load balancer has marked it in.
func (e *Env) StartReplica(i int) error {
	if err := e.ready("StartReplica"); err != nil {
		return err
	}
	return e.cp.startReplica(i)
}

// RestartReplica stops kube-apiserver replica i as how says, starts it
// again and returns once it is ready and back in the load balancer.
func (e *Env) RestartReplica(i int, how Stop) error {
	if err := e.ready("RestartReplica"); err != nil {
		return err
	}
	return e.cp.restartReplica(i, how)
}

// RollingRestart restarts each kube-apiserver replica in turn as how says,
// waiting for each to be ready and back in the load balancer before it
// stops the next: with Graceful, an upgrade of an HA control plane.
func (e *Env) RollingRestart(how Stop) error {
	if err := e.ready("RollingRestart"); err != nil {
		return err
	}
	return e.cp.rollingRestart(how)
}

// ready is nil if e has a running control plane.
func (e *Env) ready(method string) error {
	if e.err != nil {
		return e.err
	}
	if e.cp == nil {
		return fmt.Errorf("kubetest: %s: no control plane: KUBEBUILDER_ASSETS is not set", method)
	}
	return nil
}

// validate reports the first option out of range, by field and value.
func (o *Options) validate() error {
	var errs []error
	if o.Replicas < 0 {
		errs = append(errs, fmt.Errorf("Options.Replicas is %d: want 0 or more", o.Replicas))
	}
	if o.Replicas <= 1 {
		// The balancer's settings without a balancer are a mistake.
		for _, f := range []struct {
			name string
			set  bool
			val  any
		}{
			{"HealthCheckInterval", o.HealthCheckInterval != 0, o.HealthCheckInterval},
			{"UnhealthyThreshold", o.UnhealthyThreshold != 0, o.UnhealthyThreshold},
			{"HealthyThreshold", o.HealthyThreshold != 0, o.HealthyThreshold},
		} {
			if f.set {
				errs = append(errs, fmt.Errorf("Options.%s is %v, but there is no load balancer: Options.Replicas is %d, want 2 or more", f.name, f.val, o.Replicas))
			}
		}
	}
	if o.HealthCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("Options.HealthCheckInterval is %v: want a positive duration, or 0 for %v", o.HealthCheckInterval, DefaultHealthCheckInterval))
	}
	if o.UnhealthyThreshold < 0 {
		errs = append(errs, fmt.Errorf("Options.UnhealthyThreshold is %d: want 1 or more, or 0 for %d", o.UnhealthyThreshold, DefaultUnhealthyThreshold))
	}
	if o.HealthyThreshold < 0 {
		errs = append(errs, fmt.Errorf("Options.HealthyThreshold is %d: want 1 or more, or 0 for %d", o.HealthyThreshold, DefaultHealthyThreshold))
	}
	// kube-apiserver's own bounds, checked here so that the error names
	// the field rather than the flag.
	if o.GoawayChance < 0 || o.GoawayChance > 0.02 {
		errs = append(errs, fmt.Errorf("Options.GoawayChance is %v: want 0 (off) to 0.02", o.GoawayChance))
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("Options.ShutdownDelay is %v: want 0 or more", o.ShutdownDelay))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

// balancerConfig is o's, defaults filled in.
func (o *Options) balancerConfig() balancerConfig {
	c := balancerConfig{interval: o.HealthCheckInterval, unhealthy: o.UnhealthyThreshold, healthy: o.HealthyThreshold}
	if c.interval == 0 {
		c.interval = DefaultHealthCheckInterval
	}
	if c.unhealthy == 0 {
		c.unhealthy = DefaultUnhealthyThreshold
	}
	if c.healthy == 0 {
		c.healthy = DefaultHealthyThreshold
	}
	return c
}

// shutdownDelay is long enough for the balancer to mark a replica out
// after SIGTERM before it stops serving new requests: the check due
// next may come a whole interval later, each of the failed checks that
// mark it out may take an interval, and a second covers a busy machine.
func (c balancerConfig) shutdownDelay() time.Duration {
	return time.Duration(c.unhealthy+1)*c.interval + time.Second
}

// typedArgs are the kube-apiserver flags of o's typed fields that are
// set.
func (o *Options) typedArgs() map[string]string {
	m := map[string]string{}
	if o.GoawayChance != 0 {
		m["goaway-chance"] = fmt.Sprint(o.GoawayChance)
	}
	if o.ShutdownDelay != 0 {
		m["shutdown-delay-duration"] = o.ShutdownDelay.String()
	}
	return m
}
