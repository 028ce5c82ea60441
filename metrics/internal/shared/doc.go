// Package shared holds what metrics has in common with other modules of
// kubewire: the label values of retry's classes and reasons and timeout's
// phases, which tracing's attributes use too. No module imports another's
// internal packages, so its files are generated from the templates in
// hack/shared (targets.txt), the one source of every module's copy.
package shared
