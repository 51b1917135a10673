package valkey_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// benchBody is the ~200-byte JSON answer of e2e/bench's upstream: the
// response every memory figure in docs/performance.md is measured with.
var benchBody = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR",` +
	`"customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],` +
	`"created_at":"2025-01-01T00:00:00Z","pad":"xxxxxxxxxxxx"}` + "\n")

// benchRecord returns the identity, claim and response of the i-th record
// of the memory measurement: what the proxy stores for the bench's create
// (headers as proxy.StoredHeader keeps them, a UUID-sized key, an hs1
// fingerprint and the default recipe).
func benchRecord(i int) (store.ClaimParams, store.Response) {
	id := store.Identity{Owner: "user-" + strconv.Itoa(i%16), Scope: "default", Key: fmt.Sprintf("8e03978e-40d5-43e8-bc93-%012d", i)}
	p := store.ClaimParams{Identity: id, Fingerprint: "hs1:" + strings.Repeat(fmt.Sprintf("%08x", i), 8),
		Recipe: "b=raw&h=content-type&q=1&v=hs1", Token: fmt.Sprintf("tok-%024d", i), Lease: time.Minute, Retention: 24 * time.Hour}
	resp := store.Response{Status: 201, Body: benchBody, Header: http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/v1/orders/ord_0000000000000001"},
		"Date":         {"Mon, 02 Jan 2006 15:04:05 GMT"},
	}}
	return p, resp
}

// memoryRecords is how many records the measurement writes: 100,000 (the
// figure of docs/performance.md) unless IDEMGATE_MEMORY_RECORDS says
// otherwise (a smaller count for a quick look).
func memoryRecords(t *testing.T) int {
	n := 100_000
	if v := os.Getenv("IDEMGATE_MEMORY_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("IDEMGATE_MEMORY_RECORDS=%q: want an integer >= 1000", v)
		}
	}
	return n
}

func usedMemory(t *testing.T, c vk.Client) int64 {
	t.Helper()
	info, err := c.Do(t.Context(), c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO memory: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// TestMemoryPerCompletedRecord writes completed records for the bench's
// response through the store (claim.lua then complete.lua) on a fresh
// valkey-server and reports used_memory per record, the figure issue 17
// asks to halve. It fails when a record costs more than maxBytesPerRecord,
// so a layout change that brings the cost back shows here.
func TestMemoryPerCompletedRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	c := raw(t, srv.Addr())
	s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}})
	n := memoryRecords(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	before := usedMemory(t, c)

	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				p, resp := benchRecord(i)
				if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
					errs <- fmt.Errorf("Claim %d: %+v, %w", i, res, err)
					return
				}
				if ok, err := s.Complete(ctx, p.Identity, p.Token, resp); !ok || err != nil {
					errs <- fmt.Errorf("Complete %d: %v, %w", i, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := usedMemory(t, c)
	p, resp := benchRecord(n / 2)
	key := s.Key(p.Identity)
	usage, err := c.Do(ctx, c.B().MemoryUsage().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("MEMORY USAGE: %v", err)
	}
	enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("OBJECT ENCODING: %v", err)
	}
	per := float64(after-before) / float64(n)
	t.Logf("%d completed records, body %d bytes: used_memory %.0f bytes per record, MEMORY USAGE %d bytes, encoding %s",
		n, len(resp.Body), per, usage, enc)
	// Layout 2 cost 1,962 bytes per record here (docs/performance.md);
	// issue 17 asks for at most half.
	if per > 981 {
		t.Errorf("used_memory per completed record = %.0f bytes, want at most 981 (half of layout 2's 1,962)", per)
	}
	// The replay still answers the original response.
	res, err := s.Claim(ctx, store.ClaimParams{Identity: p.Identity, Fingerprint: p.Fingerprint, Token: "other", Lease: time.Minute})
	if err != nil || res.State != store.Completed || string(res.Response.Body) != string(resp.Body) {
		t.Fatalf("replay of record %d: %+v, %v", n/2, res, err)
	}
}
