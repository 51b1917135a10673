package store_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// The store contract as the engine uses it, on the memory store: a claim
// takes a free identity once, a second claim while the first runs is told
// so, a completion stores the response for every later claim, and a
// release frees the identity for the next attempt. Every driver (memory,
// bolt, valkey, postgres) answers the same way; store/storetest checks it.
func Example() {
	ctx := context.Background()
	var s store.Store = memory.New()
	defer s.Close()

	id := store.Identity{Owner: "h:alice", Scope: "default", Key: "order-123"}
	first := store.ClaimParams{Identity: id, Fingerprint: "fp-1", Token: "attempt-1", Lease: 10 * time.Second, Retention: 24 * time.Hour}
	res, err := s.Claim(ctx, first)
	if err != nil {
		log.Fatal(err) // wraps store.ErrUnavailable: fail closed, never forward
	}
	fmt.Println("first attempt:", res.State)

	// A duplicate while the first runs: it may Watch and claim again later.
	dup := first
	dup.Token = "attempt-2"
	res, _ = s.Claim(ctx, dup)
	fmt.Println("duplicate while running:", res.State)

	// The holder of the claim records the upstream's answer.
	ok, _ := s.Complete(ctx, id, "attempt-1", store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"id":"ord_1"}`),
	})
	fmt.Println("completed:", ok)

	// A retry finds the record completed, with the fingerprint to compare
	// (the engine answers 422 when it differs) and the response to replay.
	dup.Token = "attempt-3"
	res, _ = s.Claim(ctx, dup)
	fmt.Println("retry:", res.State, res.Fingerprint, res.Response.Status, string(res.Response.Body))

	// An attempt that did nothing (the upstream could not be reached)
	// releases its claim, so the next attempt runs.
	other := store.ClaimParams{Identity: store.Identity{Owner: "h:alice", Scope: "default", Key: "order-124"}, Fingerprint: "fp-2", Token: "attempt-4", Lease: 10 * time.Second}
	_, _ = s.Claim(ctx, other)
	released, _ := s.Release(ctx, other.Identity, "attempt-4")
	other.Token = "attempt-5"
	res, _ = s.Claim(ctx, other)
	fmt.Println("released:", released, "next attempt:", res.State)
	// Output:
	// first attempt: claimed
	// duplicate while running: running
	// completed: true
	// retry: completed fp-1 201 {"id":"ord_1"}
	// released: true next attempt: claimed
}
