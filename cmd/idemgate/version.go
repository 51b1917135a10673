package main

import (
	"runtime/debug"
)

// devVersion is the version of a build that was not stamped with
// -ldflags "-X main.version=..." (see README, "Building a release").
const devVersion = "dev"

// revisionDigits is how much of a VCS revision a dev version shows.
const revisionDigits = 12

func init() {
	// Resolved once, before main: every use (the version command, the
	// idemgate_build_info metric, tracing's service.version, the start
	// log line) sees the same value.
	version = resolveVersion(version, debug.ReadBuildInfo)
}

// resolveVersion returns the version to report: stamped, when the build
// set it with -ldflags; else the main module's version from the build
// information: go install module@v1.2.3 records v1.2.3, and since Go 1.24
// a build in a git checkout records the tag or a pseudo-version naming the
// commit (v0.0.0-20261202010000-cc9c922abcde, "+dirty" when the tree had
// changes); else, when the go command recorded only the VCS revision
// (vcs.revision, vcs.modified), "dev+" and its first 12 digits, with
// ".dirty" for a changed tree; else "dev" (no VCS information: a build
// outside a git checkout, in a git worktree, or with -buildvcs=false).
// readBuildInfo is debug.ReadBuildInfo.
func resolveVersion(stamped string, readBuildInfo func() (*debug.BuildInfo, bool)) string {
	if stamped != "" && stamped != devVersion {
		return stamped
	}
	info, ok := readBuildInfo()
	if !ok || info == nil {
		return devVersion
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return devVersion
	}
	v := devVersion + "+" + rev[:min(len(rev), revisionDigits)]
	if dirty {
		v += ".dirty"
	}
	return v
}
