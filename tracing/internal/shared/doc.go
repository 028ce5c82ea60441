// Package shared holds the helpers tracing has in common with other
// modules of kubewire: refusing a typed nil, and the values of retry's
// classes and reasons and timeout's phases, which metrics' labels use too.
// No module imports another's internal packages, so its files are
// generated from the templates in hack/shared (targets.txt), the one
// source of every module's copy.
package shared
