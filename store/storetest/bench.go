package storetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// benchResponse is a typical small JSON answer: 3 headers, 256-byte body.
func benchResponse() store.Response {
	body := make([]byte, 256)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	return store.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/orders/1"}, "Set-Cookie": {"a=1", "b=2"}},
		Body:   body,
	}
}

// BenchmarkClaimComplete measures Claim then Complete on a fresh identity
// (the first request of every idempotency key), sequentially and with
// b.RunParallel. One op is the pair of calls.
func BenchmarkClaimComplete(b *testing.B, st store.Store) {
	ctx := context.Background()
	resp := benchResponse()
	prefix := "bench-" + random(4) + "-"
	var n atomic.Int64
	one := func(b *testing.B) {
		id := store.Identity{Owner: "owner", Scope: "POST /orders", Key: prefix + strconv.FormatInt(n.Add(1), 10)}
		tok := "tok-" + id.Key
		res, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Hour})
		if err != nil || res.State != store.Claimed {
			b.Fatalf("Claim: %+v %v", res, err)
		}
		if ok, err := st.Complete(ctx, id, tok, resp); !ok || err != nil {
			b.Fatalf("Complete: %v %v", ok, err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one(b)
			}
		})
	})
}

// BenchmarkClaimCompleted measures Claim on an identity that is already
// completed (a retry answered with a replay), sequentially and with
// b.RunParallel.
func BenchmarkClaimCompleted(b *testing.B, st store.Store) {
	ctx := context.Background()
	id := store.Identity{Owner: "owner", Scope: "POST /orders", Key: "bench-completed-" + random(4)}
	res, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
	if err != nil || res.State != store.Claimed {
		b.Fatalf("Claim: %+v %v", res, err)
	}
	if ok, err := st.Complete(ctx, id, "t", benchResponse()); !ok || err != nil {
		b.Fatalf("Complete: %v %v", ok, err)
	}
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "retry", Lease: time.Minute, Retention: time.Hour}
	one := func(b *testing.B) {
		res, err := st.Claim(ctx, p)
		if err != nil || res.State != store.Completed {
			b.Fatalf("Claim on completed: %+v %v", res, err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one(b)
			}
		})
	})
}
