package valkey

import valkeygo "github.com/valkey-io/valkey-go"

// PipelineCapacity is how many commands the client sends to one
// standalone or Sentinel server without a caller waiting for room: every
// command goes through a connection's ring (AlwaysPipelining), of
// valkeygo.DefaultRingScale (2^10 = 1,024) slots each, and a slot is held
// until its reply; there are connsPerServer connections. A caller past it
// blocks in the client until a reply frees a slot, so this is the Valkey
// store's pool size: the default server.max_store_waiting (config) admits
// that many keyed requests to wait for a store answer at once. A Cluster
// client opens one connection per node, so its capacity per node is
// smaller and its total larger.
func PipelineCapacity() int { return connsPerServer() << valkeygo.DefaultRingScale }
