// Package aptget installs Debian packages for the tests and the benchmark
// (nginx, Node.js): apt-get from the sources already configured on the
// machine, through sudo when not root, never another registry.
package aptget

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Runner runs apt-get and other commands as root, writing their output to
// a log.
type Runner struct {
	ctx  context.Context
	log  io.Writer
	sudo []string
}

// New returns a Runner after `apt-get update`, or an error saying that
// apt-get is missing or the update failed; hint (how to install by hand)
// ends every error.
func New(ctx context.Context, log io.Writer, hint string) (*Runner, error) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return nil, errors.New(hint + " (apt-get not found)")
	}
	r := &Runner{ctx: ctx, log: log}
	if os.Geteuid() != 0 {
		r.sudo = []string{"sudo"}
	}
	if err := r.Run("apt-get", "update", "-qq"); err != nil {
		return nil, fmt.Errorf("apt-get update: %w; %s", err, hint)
	}
	return r, nil
}

// Install runs `apt-get install` of pkgs, without recommended packages.
func (r *Runner) Install(pkgs ...string) error {
	return r.Run(append([]string{"apt-get", "install", "-y", "-qq", "--no-install-recommends"}, pkgs...)...)
}

// Run runs args (a command and its arguments) as root, non-interactive.
func (r *Runner) Run(args ...string) error {
	args = append(append([]string(nil), r.sudo...), args...)
	cmd := exec.CommandContext(r.ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = r.log, r.log
	return cmd.Run()
}
