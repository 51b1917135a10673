package valkey_test

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

// serverCPU is srv's CPU time in seconds (valkeytest.Server.CPUSeconds).
func serverCPU(b *testing.B, srv *valkeytest.Server) float64 {
	cpu, err := srv.CPUSeconds()
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// commandCalls sums the calls of every command in INFO commandstats,
// those scripts make included.
func commandCalls(b *testing.B, srv *valkeytest.Server) (calls int64, byCommand map[string]int64) {
	out, err := srv.CLI("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	byCommand = map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(stats, ",", 2)[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		byCommand[strings.TrimPrefix(name, "cmdstat_")] = n
		calls += n
	}
	return calls, byCommand
}

// BenchmarkServerCPUPerFreshOp runs Claim then Complete on fresh
// identities from many goroutines, the replay cache on as in production,
// and reports Valkey's own CPU per pair (INFO cpu before and after) as
// server-µs/op, and the commands Valkey ran per pair (INFO commandstats,
// those inside scripts included) as commands/op: they set how many
// shards a rate of fresh keys needs. It runs once per stored layout.
func BenchmarkServerCPUPerFreshOp(b *testing.B) {
	for _, layout := range []int{valkey.Layout3, valkey.Layout4, valkey.Layout5} {
		b.Run("layout"+strconv.Itoa(layout), func(b *testing.B) { benchServerCPU(b, layout, 0) })
	}
}

// BenchmarkServerCPUPerFreshOpInALargeKeyspace is
// BenchmarkServerCPUPerFreshOp/layout5 on a server that already holds
// 500,000 completed records with an expiry, as one does after a few
// minutes of fresh keys: each lookup of a key and of its expiry then
// misses the processor's caches. 500,000 records and the benchmark's own
// stay below 2^20 keys, where Valkey 8.0 grows its tables, so no rehash of
// the whole keyspace falls inside the timed loop (docs/performance.md,
// "Where Valkey's CPU goes in the bench").
func BenchmarkServerCPUPerFreshOpInALargeKeyspace(b *testing.B) {
	benchServerCPU(b, valkey.Layout5, 500_000)
}

// fill writes n string keys of a completed record's size, each expiring
// in an hour, in batches of 1,000 commands.
func fill(b *testing.B, addr string, n int) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	val := "4c" + strings.Repeat("x", 400)
	for i := 0; i < n; i += 1000 {
		cmds := make(vk.Commands, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			cmds = append(cmds, c.B().Set().Key("fill:"+strconv.Itoa(j)+":0123456789abcdef").Value(val).Px(time.Hour).Build())
		}
		for _, r := range c.DoMulti(context.Background(), cmds...) {
			if err := r.Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchServerCPU(b *testing.B, layout, keys int) {
	srv := valkeytest.Start(b)
	addr, own := srv.Addr(), true
	// A server started elsewhere, e.g. under valgrind --tool=callgrind,
	// whose instruction counts per op do not depend on the machine's load
	// (docs/performance.md, "Hot path at a glance").
	if a := os.Getenv("IDEMGATE_BENCH_VALKEY_ADDR"); a != "" {
		addr, own = a, false
	}
	if keys > 0 {
		fill(b, addr, keys)
	}
	st := newStore(b, valkey.Options{Addrs: []string{addr}, KeyPrefix: randomPrefix(), CacheBytes: 32 << 20, Layout: layout})
	ctx := context.Background()
	resp := store.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/orders/1"}},
		Body:   []byte(strings.Repeat(`{"id":"ord_1234567890","amount":1000}`, 6)),
	}
	var n atomic.Int64
	b.SetParallelism(16)
	_, _ = srv.CLI("CONFIG", "RESETSTAT")
	before := serverCPU(b, srv)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := store.Identity{Owner: "owner", Scope: "POST /orders", Key: "k" + strconv.FormatInt(n.Add(1), 10)}
			tok := "tok-" + id.Key
			res, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "v2:" + strings.Repeat("f", 43), Token: tok, Lease: time.Minute, Retention: time.Hour})
			if err != nil || res.State != store.Claimed {
				b.Errorf("Claim: %+v %v", res, err)
				return
			}
			if ok, err := st.Complete(ctx, id, tok, resp); !ok || err != nil {
				b.Errorf("Complete: %v %v", ok, err)
				return
			}
		}
	})
	b.StopTimer()
	after := serverCPU(b, srv)
	if own {
		b.ReportMetric((after-before)*1e6/float64(b.N), "server-µs/op")
		// INFO's own calls (two of serverCPU, one here) are left out.
		calls, byCommand := commandCalls(b, srv)
		b.ReportMetric(float64(calls-byCommand["info"])/float64(b.N), "commands/op")
		if testing.Verbose() {
			b.Log(byCommand)
		}
	}
}
