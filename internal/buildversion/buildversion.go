// Package buildversion resolves the idemgate version a build reports (the
// version command, idemgate_build_info, tracing's service.version, the
// start log line), for the idemgate binary and for a service that embeds
// the middleware alike.
package buildversion

import "runtime/debug"

// Module is idemgate's module path, as go.mod declares it.
const Module = "github.com/idemgate/idemgate"

// Dev is the version of a build nothing identifies (no stamp, no module
// version, no VCS information).
const Dev = "dev"

// revisionDigits is how much of a VCS revision a dev version shows.
const revisionDigits = 12

// Resolve returns the version to report. In order: stamped, when a
// release build set it with -ldflags "-X main.version=..." (and it is not
// Dev); the idemgate module's version from the build information — as a
// dependency of another main module (a service that imports the
// middleware: the version its go.mod requires), or as the main module (go
// install module@v1.2.3 records v1.2.3, and since Go 1.24 a build in a git
// checkout records the tag or a pseudo-version naming the commit,
// "+dirty" when the tree had changes); else, when the go command recorded
// only the VCS revision of an idemgate checkout (vcs.revision,
// vcs.modified), "dev+" and its first 12 digits with ".dirty" for a
// changed tree; else Dev (a build outside a git checkout, in a git
// worktree, or with -buildvcs=false). read is debug.ReadBuildInfo, a
// parameter so tests can give any build.
func Resolve(stamped string, read func() (*debug.BuildInfo, bool)) string {
	if stamped != "" && stamped != Dev {
		return stamped
	}
	info, ok := read()
	if !ok || info == nil {
		return Dev
	}
	if info.Main.Path != Module {
		for _, d := range info.Deps {
			if d.Path == Module && known(d.Version) {
				return d.Version
			}
		}
		return Dev
	}
	if known(info.Main.Version) {
		return info.Main.Version
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
		return Dev
	}
	v := Dev + "+" + rev[:min(len(rev), revisionDigits)]
	if dirty {
		v += ".dirty"
	}
	return v
}

// known reports whether v is a module version rather than the go
// command's placeholder for a module built from its directory.
func known(v string) bool { return v != "" && v != "(devel)" }
