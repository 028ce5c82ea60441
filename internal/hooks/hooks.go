// Package hooks is what kubewire's WithObserver options share: every
// observer given is called, in order, and a typed nil is refused.
package hooks

import "reflect"

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

// IsNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface: a typed nil, which a nil check of the interface
// misses and which would panic on the first call.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
