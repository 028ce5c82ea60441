// Package hooks composes the observer hooks of kubewire's packages:
// every observer given to a WithObserver option is called, in order.
package hooks

// Then returns a function that calls f, then g; f may be nil.
func Then[T any](f, g func(T)) func(T) {
	if f == nil {
		return g
	}
	return func(v T) {
		f(v)
		g(v)
	}
}
