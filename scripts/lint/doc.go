// Package lint pins the linters scripts/lint.sh runs over every module of the
// repository: staticcheck (honnef.co/go/tools) and govulncheck
// (golang.org/x/vuln), the `tool` lines in go.mod, their checksums in go.sum.
// It is a module of its own, like deploy/tools, so that the idemgate module
// does not depend on the linters and an upgrade of one is a reviewed change
// of this go.mod, never whatever version is newest on the day.
package lint
