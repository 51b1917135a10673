package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMaxFlushDelay: with the longest pause the configuration allows,
// concurrent claims and completions (the case where the writer pauses)
// all land, each key's second claim finds it completed, and a manual
// cancel of calls stuck on a stalled server still returns promptly, as
// without a pause (the reason for AlwaysPipelining). A negative pause is
// refused.
func TestMaxFlushDelay(t *testing.T) {
	srv := valkeytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, MaxFlushDelay: -time.Microsecond}); err == nil {
		_ = s.Close()
		t.Fatal("New with MaxFlushDelay -1µs: want an error")
	} else if !strings.Contains(err.Error(), "MaxFlushDelay") {
		t.Fatalf("New with MaxFlushDelay -1µs: err = %v, want it to name MaxFlushDelay", err)
	}

	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), MaxFlushDelay: time.Millisecond, Layout: valkey.Layout4})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := store.Identity{Owner: "o", Scope: "POST /orders", Key: "k" + strconv.Itoa(i)}
			tok := "tok-" + id.Key
			res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Hour})
			if err != nil || res.State != store.Claimed {
				errs <- errors.Join(errors.New("claim "+id.Key+": "+res.State.String()), err)
				return
			}
			if ok, err := s.Complete(ctx, id, tok, store.Response{Status: 201, Body: []byte(id.Key)}); !ok || err != nil {
				errs <- errors.Join(errors.New("complete "+id.Key), err)
				return
			}
			res, err = s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "other", Lease: time.Minute, Retention: time.Hour})
			if err != nil || res.State != store.Completed || string(res.Response.Body) != id.Key {
				errs <- errors.Join(errors.New("second claim "+id.Key+": "+res.State.String()), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	srv.Pause()
	t.Cleanup(srv.Resume)
	stuck, cancelStuck := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancelStuck)
	start := time.Now()
	errs = make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := s.Claim(stuck, store.ClaimParams{Identity: store.Identity{Key: "stuck" + strconv.Itoa(i)}, Fingerprint: "fp", Token: "t", Lease: time.Minute})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("Claim with canceled ctx: err = %v, want ErrUnavailable and context.Canceled", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("claims with ctx canceled after 100ms took %v", took)
	}
}

// BenchmarkMaxFlushDelay measures what Options.MaxFlushDelay buys and
// costs (docs/performance.md, "Pipeline flush delay"): fresh keys (Claim
// then Complete, layout 4) from few callers and from many, with no pause
// and with the pauses the configuration suggests. It reports this
// process's CPU (client-µs/op, valkey-go's pipe goroutines included) and
// Valkey's (server-µs/op) per fresh key; ns/op is the latency a caller
// sees, divided by the callers.
func BenchmarkMaxFlushDelay(b *testing.B) {
	for _, callers := range []int{1, 32} {
		for _, d := range []time.Duration{0, 20 * time.Microsecond, 50 * time.Microsecond} {
			b.Run("parallelism="+strconv.Itoa(callers)+"/delay="+d.String(), func(b *testing.B) { benchFlushDelay(b, callers, d) })
		}
	}
}

func benchFlushDelay(b *testing.B, parallelism int, delay time.Duration) {
	srv := valkeytest.Start(b)
	st := newStore(b, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), CacheBytes: 32 << 20, Layout: valkey.Layout4, MaxFlushDelay: delay})
	ctx := context.Background()
	resp := store.Response{Status: 201, Body: []byte(strings.Repeat(`{"id":"ord_1234567890","amount":1000}`, 6))}
	var n atomic.Int64
	processCPU := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	}
	b.SetParallelism(parallelism)
	client, server := processCPU(), serverCPU(b, srv)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := store.Identity{Owner: "owner", Scope: "POST /orders", Key: "k" + strconv.FormatInt(n.Add(1), 10)}
			tok := "tok-" + id.Key
			if res, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
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
	b.ReportMetric((processCPU()-client)/float64(b.N), "client-µs/op")
	b.ReportMetric((serverCPU(b, srv)-server)*1e6/float64(b.N), "server-µs/op")
}
