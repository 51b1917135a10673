package valkey

import (
	"math/bits"

	valkeygo "github.com/valkey-io/valkey-go"
)

// DefaultConnections is Options.Connections when 0: one pipelined
// connection per Valkey server. valkey-go's own default is 2 on 2 or 3
// CPUs and 4 from 4; on the 2-CPU bench one connection carried a fresh
// key in less CPU of both idemgate and Valkey, at no cost to latency with
// 2 requests in flight (docs/performance.md, "Connections per server").
const DefaultConnections = 1

// MaxConnections is the most Options.Connections accepts: valkey-go's
// MaxPipelineMultiplex (8) as a count.
const MaxConnections = 1 << valkeygo.MaxPipelineMultiplex

// ValidConnections reports whether n is a count Options.Connections
// accepts: a power of two from 1 to MaxConnections.
func ValidConnections(n int) bool { return n >= 1 && n <= MaxConnections && n&(n-1) == 0 }

// pipelineMultiplex is valkey-go's ClientOption.PipelineMultiplex for n
// connections per server (ValidConnections): log2 n, except that 0 there
// is valkey-go's own default (2 or 4 by GOMAXPROCS), so one is -1.
func pipelineMultiplex(n int) int {
	if n == 1 {
		return -1
	}
	return bits.Len(uint(n)) - 1
}

// PipelineCapacity is how many commands the client sends to one
// standalone or Sentinel server without a caller waiting for room, with
// conns connections per server (Options.Connections; 0 is
// DefaultConnections): every command goes through a connection's ring
// (AlwaysPipelining), of valkeygo.DefaultRingScale (2^10 = 1,024) slots
// each, and a slot is held until its reply. A caller past it blocks in the
// client until a reply frees a slot, so this is the Valkey store's pool
// size: the default server.max_store_waiting (config) admits that many
// keyed requests to wait for a store answer at once. A Cluster client
// opens as many per node, so its capacity per node is the same and its
// total larger.
func PipelineCapacity(conns int) int {
	if conns <= 0 {
		conns = DefaultConnections
	}
	return conns << valkeygo.DefaultRingScale
}
