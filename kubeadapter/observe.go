package kubeadapter

import (
	"net/http"
	"strconv"

	clientgometrics "k8s.io/client-go/tools/metrics"

	"github.com/kubewire/kubewire/kubeadapter/internal/shared"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

// Observer hears what the stack learns about each request: every attempt
// (pooltrace), every retry decision (retry) and every timeout that runs
// out (timeout). The metrics package's Metrics is one; [ObserverFuncs] adapts
// plain functions. Methods are called concurrently and must not block.
type Observer interface {
	ObserveAttempt(pooltrace.Attempt)
	ObserveDecision(retry.Decision)
	ObserveExceeded(timeout.Exceeded)
}

// ObserverFuncs is an [Observer] made of functions; a nil function is
// skipped.
type ObserverFuncs struct {
	Attempt  func(pooltrace.Attempt)
	Decision func(retry.Decision)
	Exceeded func(timeout.Exceeded)
}

// ObserveAttempt calls f.Attempt.
func (f ObserverFuncs) ObserveAttempt(a pooltrace.Attempt) {
	if f.Attempt != nil {
		f.Attempt(a)
	}
}

// ObserveDecision calls f.Decision.
func (f ObserverFuncs) ObserveDecision(d retry.Decision) {
	if f.Decision != nil {
		f.Decision(d)
	}
}

// ObserveExceeded calls f.Exceeded.
func (f ObserverFuncs) ObserveExceeded(e timeout.Exceeded) {
	if f.Exceeded != nil {
		f.Exceeded(e)
	}
}

// WithObserver adds o to the observers of the stack; every observer given
// hears everything. Must not be nil. Default: none.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) {
		if o == nil {
			c.fail("WithObserver must not be nil")
			return
		}
		if shared.IsNil(o) {
			c.fail("WithObserver must not be nil, got a nil %T", o)
			return
		}
		c.observers = append(c.observers, o)
	})
}

// each returns a function that calls method of every observer in os, in
// order, or nil when there is none.
func each[T any](os []Observer, method func(Observer) func(T)) func(T) {
	var f func(T)
	for _, o := range os {
		f = shared.Then(f, method(o))
	}
	return f
}

// observeDecision returns the retry observer: client-go's retry metric,
// then os.
func observeDecision(os []Observer) func(retry.Decision) {
	f := each(os, func(o Observer) func(retry.Decision) { return o.ObserveDecision })
	return func(d retry.Decision) {
		if d.Retry {
			countRetry(d)
		}
		if f != nil {
			f(d)
		}
	}
}

// countRetry reports a retry the stack decides, before its wait, to
// client-go's metric (see the package documentation). It reads
// tools/metrics.RequestRetry on every call, so a registration after Apply
// counts too.
func countRetry(d retry.Decision) {
	code := "<error>"
	if d.Err == nil {
		code = strconv.Itoa(d.StatusCode)
	}
	host := "none"
	if d.Request.URL != nil {
		host = d.Request.URL.Host
	}
	method := d.Request.Method
	if method == "" {
		method = http.MethodGet
	}
	clientgometrics.RequestRetry.IncrementRetry(d.Request.Context(), code, method, host)
}
