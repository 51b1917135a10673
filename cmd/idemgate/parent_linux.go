package main

import "syscall"

// setParentDeathSignal asks the kernel to send this process SIGTERM when
// the thread that started it exits (prctl PR_SET_PDEATHSIG); a failure
// leaves the PID poll of untilParentExits.
func setParentDeathSignal() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0)
}
