package kube

import "syscall"

// sysProcAttr has the kernel kill the servers if the test binary dies
// without running its cleanups (a panic, a timeout, SIGKILL), so no
// orphan keeps a port or 300 MB.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
