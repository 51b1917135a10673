package buildversion

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	info := func(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: Module, Version: mainVersion}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	// A service's binary that requires idemgate (the middleware).
	dep := func(version string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{
				Main:     debug.Module{Path: "example.com/orders", Version: "v9.0.0"},
				Deps:     []*debug.Module{{Path: "github.com/other/lib", Version: "v1.0.0"}, {Path: Module, Version: version}},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ffffffffffffffff"}},
			}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, c := range []struct {
		name, stamped string
		read          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"ldflags win", "v1.4.0", info("v1.3.0", "vcs.revision", "abc"), "v1.4.0"},
		{"go install module@version", "dev", info("v1.3.0"), "v1.3.0"},
		{"pseudo-version", "dev", info("v0.0.0-20261202010000-cc9c922abcde"), "v0.0.0-20261202010000-cc9c922abcde"},
		{"source build, clean", "dev", info("(devel)", "vcs", "git", "vcs.revision", "cc9c922abcdef0123456789", "vcs.modified", "false"), "dev+cc9c922abcde"},
		{"source build, changed tree", "dev", info("(devel)", "vcs.revision", "cc9c922abcdef0123456789", "vcs.modified", "true"), "dev+cc9c922abcde.dirty"},
		{"short revision", "dev", info("", "vcs.revision", "abc"), "dev+abc"},
		{"no VCS information", "dev", info("(devel)"), "dev"},
		{"no build information", "dev", none, "dev"},
		{"a dependency of a service", "", dep("v1.3.0"), "v1.3.0"},
		{"a replaced dependency (the service's revision is not idemgate's)", "", dep("(devel)"), "dev"},
	} {
		if got := Resolve(c.stamped, c.read); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
