package storetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/store"
)

// BenchBody is the 227-byte JSON answer of e2e/bench's upstream: the
// response every per-record size figure in docs/performance.md ("Record
// memory") is measured with.
var BenchBody = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR",` +
	`"customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],` +
	`"created_at":"2025-01-01T00:00:00Z","pad":"xxxxxxxxxxxx"}` + "\n")

// BenchRecord returns the claim and response of the i-th record of a size
// measurement: what the proxy stores for the bench's create (headers as
// proxy.StoredHeader keeps them, a UUID-sized key, an hs1 fingerprint, the
// default recipe, 24 h retention). It is the record of store/valkey's
// TestMemoryPerCompletedRecord, so the drivers' figures compare.
func BenchRecord(i int) (store.ClaimParams, store.Response) {
	id := store.Identity{Owner: "user-" + strconv.Itoa(i%16), Scope: "default", Key: fmt.Sprintf("8e03978e-40d5-43e8-bc93-%012d", i)}
	p := store.ClaimParams{Identity: id, Fingerprint: "hs1:" + strings.Repeat(fmt.Sprintf("%08x", i), 8),
		Recipe: "b=raw&h=content-type&q=1&v=hs1", Token: fmt.Sprintf("tok-%024d", i), Lease: time.Minute, Retention: 24 * time.Hour}
	resp := store.Response{Status: 201, Body: BenchBody, Header: http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/v1/orders/ord_0000000000000001"},
		"Date":         {"Mon, 02 Jan 2006 15:04:05 GMT"},
	}}
	return p, resp
}

// SizeRecords is how many records a size measurement writes: 100,000 (the
// figure of docs/performance.md), or 10,000 under the race detector (the
// contract run, `go test -race`, which would take minutes for the full
// count and whose per-record figures come out within a few percent),
// unless IDEMGATE_MEMORY_RECORDS says otherwise (at least 1000), the
// variable store/valkey's measurement reads too.
func SizeRecords(t testing.TB) int {
	n := 100_000
	if raceDetector {
		n = 10_000
	}
	if v := os.Getenv("IDEMGATE_MEMORY_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("IDEMGATE_MEMORY_RECORDS=%q: want an integer >= 1000", v)
		}
	}
	return n
}

// FillCompleted claims and completes BenchRecord 0..n-1 in s from workers
// goroutines (a network store needs several in flight to fill 100,000
// records in seconds), and returns the first failure: an error of s, or a
// claim or completion that did not take.
func FillCompleted(ctx context.Context, s store.Store, n, workers int) error {
	g, ctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			for i := w; i < n; i += workers {
				p, resp := BenchRecord(i)
				if res, err := s.Claim(ctx, p); err != nil || res.State != store.Claimed {
					return fmt.Errorf("claim %d: %+v, %w", i, res, err)
				}
				if ok, err := s.Complete(ctx, p.Identity, p.Token, resp); !ok || err != nil {
					return fmt.Errorf("complete %d: %v, %w", i, ok, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
