//go:build !linux

package kubetest

import "syscall"

// sysProcAttr: only Linux can have a child killed with its parent; a test
// binary killed elsewhere may leave its API server running.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
