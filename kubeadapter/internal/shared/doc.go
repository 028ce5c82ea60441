// Package shared holds the helpers kubeadapter has in common with other
// modules of kubewire: refusing a typed nil, adding up observers and
// telling an upgrade request. No module imports another's internal
// packages, so its files are generated from the templates in hack/shared
// (targets.txt), the one source of every module's copy.
package shared
