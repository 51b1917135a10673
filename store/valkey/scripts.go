package valkey

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/store"
)

// Every script starts with a shebang declaring its flags (#!lua, or
// #!lua flags=no-writes for get.lua), so a Valkey out of memory refuses a
// script that may write before it runs (docs/protocol.md, "Scripts").
var (
	//go:embed scripts/claim.lua
	claimLuaSrc string
	//go:embed scripts/complete.lua
	completeLua string
	//go:embed scripts/complete4.lua
	complete4Lua string
	//go:embed scripts/complete5.lua
	complete5Lua string
	//go:embed scripts/mark.lua
	markLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLuaSrc string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/get.lua
	getLua string
	//go:embed scripts/index.lua
	indexLua string
	//go:embed scripts/tombstone.lua
	tombstoneLua string
)

// claimLua and extendLua are the scripts as sent: their source with
// ABANDONED_KEEP_MS spelled as store.AbandonedKeep in milliseconds, so
// the rule has one value in every driver while the text the server runs
// (and docs/protocol.md quotes) is a plain number.
var (
	claimLua  = withConstants(claimLuaSrc)
	extendLua = withConstants(extendLuaSrc)
)

// withConstants fills the named constants into a script's source.
func withConstants(src string) string {
	return strings.ReplaceAll(src, "ABANDONED_KEEP_MS", strconv.FormatInt(store.AbandonedKeep.Milliseconds(), 10))
}

// Scripts returns the Lua source of every script by file name (claim.lua,
// complete.lua, ...), as sent to the server; for docs and tests.
func Scripts() map[string]string {
	return map[string]string{
		"claim.lua": claimLua, "complete.lua": completeLua, "complete4.lua": complete4Lua, "complete5.lua": complete5Lua, "release.lua": releaseLua,
		"extend.lua": extendLua, "delete.lua": deleteLua, "get.lua": getLua,
		"index.lua": indexLua, "tombstone.lua": tombstoneLua, "mark.lua": markLua,
	}
}
