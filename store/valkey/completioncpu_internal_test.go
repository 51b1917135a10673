package valkey

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

// BenchmarkServerCPUOfACompletion reports Valkey's own CPU (INFO cpu, as
// server-µs/op) per completion of a running record of layout 5, sent
// three ways from 16 goroutines over one pipelined connection:
//   - complete5.lua, as the store sends it within the claim's lease;
//   - the one command complete5.lua runs, SET ... XX GET PX, sent plain,
//     which checks no token;
//   - a script that only returns 1, with complete5.lua's arguments.
//
// The difference between the first two is what a server-side check of
// the token costs on Valkey 8.0, whose only conditional write is a script
// (SET ... IFEQ is Valkey 8.1's); the third shows that the cost is the
// script call itself, not the work inside it (docs/performance.md, "Where
// Valkey's CPU goes in the bench").
func BenchmarkServerCPUOfACompletion(b *testing.B) {
	for _, way := range []string{"complete5.lua", "SET-XX-GET", "script-returning-1"} {
		b.Run(way, func(b *testing.B) { benchCompletionCPU(b, way) })
	}
}

func benchCompletionCPU(b *testing.B, way string) {
	srv := valkeytest.Start(b)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ctx := context.Background()
	src := complete5Lua
	if way == "script-returning-1" {
		src = "#!lua\nreturn 1\n"
	}
	script := vk.NewLuaScript(src)
	token := func(i int64) string { return "tok-" + strconv.FormatInt(i, 36) + "-0123456789abcdef" }
	key := func(i int64) string { return "bench:POST /orders:owner:k" + strconv.FormatInt(i, 10) }
	// Running records as a fresh claim writes them: the token's prefix,
	// then numbers the completion does not read, then the mark.
	for i := int64(0); i < int64(b.N); i += 1000 {
		cmds := make(vk.Commands, 0, 1000)
		for j := i; j < min(i+1000, int64(b.N)); j++ {
			v := v5Running + tokenPrefix(v4Running, token(j))[2:] + "v2:" + strings.Repeat("f", 43) + " 60000 0 1799999999999 0"
			cmds = append(cmds, c.B().Set().Key(key(j)).Value(v).Nx().Px(time.Hour).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	rec := "4c" + strings.Repeat("x", 400)
	var n atomic.Int64
	b.SetParallelism(16)
	before, err := srv.CPUSeconds()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1) - 1
			k, tok := key(i), token(i)
			var err error
			if way == "SET-XX-GET" {
				err = c.Do(ctx, c.B().Set().Key(k).Value(rec).Xx().Get().Px(time.Hour).Build()).Error()
			} else {
				var got int64
				got, err = script.Exec(ctx, c, []string{k}, []string{v5Running + tokenPrefix(v4Running, tok)[2:], rec, "3600000", "events",
					tokenPrefix(v4Completed, tok), "0", tokenPrefix(v4Running, tok), "0"}).AsInt64()
				if err == nil && got != 1 {
					b.Errorf("%s answered %d, want 1", way, got)
					return
				}
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	after, err := srv.CPUSeconds()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric((after-before)*1e6/float64(b.N), "server-µs/op")
}
