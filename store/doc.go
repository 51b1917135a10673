// Package store defines the atomic record store that idemgate keeps one
// idempotency record per identity in: the Store contract every driver
// keeps, the record and its states, and the errors a driver answers with.
//
// A record is found by its Identity (owner, scope, key). Claim takes a
// free identity for one attempt (Claimed) or tells the caller that the
// record is Running, Completed (with the stored Response to replay and
// the fingerprint to compare), Abandoned or Gone; the holder of a claim
// Completes it with the upstream's response, Releases it when nothing was
// done, and Extends its lease while the call runs. Every method is atomic
// for its identity across the goroutines and processes that share one
// backing server. A store that cannot answer returns an error wrapping
// ErrUnavailable, never an answer, and the engine then refuses keyed
// requests (fail closed).
//
// The drivers are store/memory (one process, lost on restart), store/bolt
// (one process, one file), store/valkey and store/postgres (shared by any
// number of instances); store/storetest checks each against the contract,
// and docs/protocol.md versions their stored layouts.
package store
