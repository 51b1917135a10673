package valkey

import _ "embed"

// Every script starts with a shebang declaring its flags (#!lua, or
// #!lua flags=no-writes for get.lua), so a Valkey out of memory refuses a
// script that may write before it runs (docs/protocol.md, "Scripts").
var (
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/complete.lua
	completeLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/get.lua
	getLua string
	//go:embed scripts/index.lua
	indexLua string
	//go:embed scripts/tombstone.lua
	tombstoneLua string
)

// Scripts returns the Lua source of every script by file name (claim.lua,
// complete.lua, ...), as sent to the server; for docs and tests.
func Scripts() map[string]string {
	return map[string]string{
		"claim.lua": claimLua, "complete.lua": completeLua, "release.lua": releaseLua,
		"extend.lua": extendLua, "delete.lua": deleteLua, "get.lua": getLua,
		"index.lua": indexLua, "tombstone.lua": tombstoneLua,
	}
}
