// Package hooks is what kubewire's WithObserver options share: every
// observer given is called, in order. Its files are generated from the
// templates in hack/shared (targets.txt), which kubeadapter's copy shares.
package hooks
