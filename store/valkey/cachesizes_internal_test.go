package valkey

import (
	"math"
	"testing"
)

// TestCacheSizesLargeBound: store.valkey.cache_bytes accepts any byte size
// up to the largest int64 (an operator's "unbounded"); its split must not
// overflow into a cache of one byte per connection.
func TestCacheSizesLargeBound(t *testing.T) {
	for _, b := range []int64{1 << 40, 1 << 62, math.MaxInt64} {
		eachConn, keys, decoded := cacheSizes(b, MaxConnections)
		want := b / cacheShares * cacheSharesRaw / MaxConnections
		if int64(eachConn) < want/2 || keys < 1 || decoded < b/cacheShares/2 {
			t.Errorf("cacheSizes(%d) = %d per connection, %d keys; want about %d per connection", b, eachConn, keys, want)
		}
	}
}
