//go:build !linux

package main

// setParentDeathSignal does nothing where there is no parent-death
// signal; untilParentExits polls the parent's PID instead.
func setParentDeathSignal() {}
