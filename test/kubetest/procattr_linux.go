package kubetest

import "syscall"

// sysProcAttr has Linux SIGKILL the child when the test binary dies before
// stop, as a killed `go test` does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
