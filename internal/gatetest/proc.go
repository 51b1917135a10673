package gatetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Build runs go build of pkg with the flags into a new temporary
// directory, its output shown on stderr, and returns the executable's
// path and a function that removes the directory. It is for a TestMain
// that builds the program under test once for all its tests.
func Build(pkg, name string, flags ...string) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, name)
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", path, pkg)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		remove()
		return "", nil, fmt.Errorf("building %s: %w", pkg, err)
	}
	return path, remove, nil
}

// Signal sends sig to p unless exited (closed once p has exited and
// been waited for) is closed already, and waits for exited; after wait
// it kills p and waits on. It is how a test stops a process it started:
// SIGTERM for a graceful stop, SIGKILL for a crash.
func Signal(p *os.Process, exited <-chan struct{}, sig os.Signal, wait time.Duration) {
	select {
	case <-exited:
		return
	default:
	}
	_ = p.Signal(sig)
	select {
	case <-exited:
	case <-time.After(wait):
		_ = p.Kill()
		<-exited
	}
}
