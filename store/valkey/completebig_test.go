package valkey_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// BenchmarkCompleteBigBody completes records holding a 1 MiB body on a
// throwaway valkey-server (claim, then the timed Complete) and reports
// "body-copies": bytes Complete allocates per call over the body's size
// (docs/performance.md, "1 MiB request and response bodies"). The body is
// stored compressed (base64-like JSON), as it is (random bytes), or as it is
// because the upstream encoded it (gzip).
func BenchmarkCompleteBigBody(b *testing.B) {
	srv := valkeytest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	const size = 1 << 20
	random := make([]byte, size)
	rng := rand.New(rand.NewPCG(17, 5))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	text := make([]byte, size)
	for i := range text {
		text[i] = alphabet[random[i]&63]
	}
	n := 0 // keys are fresh across the runs of each sub-benchmark
	json := http.Header{"Content-Type": {"application/json"}}
	for _, bc := range []struct {
		name string
		resp store.Response
	}{
		{"compressed", store.Response{Status: 201, Header: json, Body: text}},
		{"incompressible", store.Response{Status: 201, Header: json, Body: random}},
		{"gzip", store.Response{Status: 201, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: random}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			var alloc uint64
			var m runtime.MemStats
			first := n + 1
			for range b.N {
				b.StopTimer()
				n++
				id := store.Identity{Owner: "o", Scope: "s", Key: strconv.Itoa(n)}
				if res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "f", Token: "t", Lease: time.Minute, Retention: time.Minute}); err != nil || res.State != store.Claimed {
					b.Fatalf("claim: %+v %v", res, err)
				}
				runtime.ReadMemStats(&m)
				before := m.TotalAlloc
				b.StartTimer()
				if ok, err := s.Complete(ctx, id, "t", bc.resp); !ok || err != nil {
					b.Fatalf("complete: %v %v", ok, err)
				}
				b.StopTimer()
				runtime.ReadMemStats(&m)
				alloc += m.TotalAlloc - before
				b.StartTimer()
			}
			b.ReportMetric(float64(alloc)/float64(b.N)/size, "body-copies")
			if rec, err := s.Get(ctx, store.Identity{Owner: "o", Scope: "s", Key: strconv.Itoa(first)}); err != nil || rec == nil || rec.Response == nil || !bytes.Equal(rec.Response.Body, bc.resp.Body) {
				b.Fatalf("the first record does not replay the body: %v", err)
			}
		})
	}
}
