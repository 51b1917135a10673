// Package proxy is the idempotency-enforcing reverse proxy: it forwards each
// operation once and answers retries from the store.
//
// # Who calls what
//
// cmd/idemgate builds one Proxy with New and serves it; it calls Drain when
// the process starts to shut down and Wait after http.Server.Shutdown, and
// NoteStoreFailure when the store reports a lost subscription. Everything
// else happens inside ServeHTTP.
//
// # The flow of a request: decide, claim, act
//
//  1. Decide (serve.go, ServeHTTP): refuse, read, resolve. The request is
//     first taken as the upstream will get it, without its hop-by-hop
//     fields (headers.go, upstreamView), so that a field the upstream never
//     gets decides nothing. The policy in force is asked once about it, by
//     its header (policy.Policy.Ask), and answers one value, a policy.Plan
//     carried in the exchange: the route that governs the request and its
//     variants, the resources a 2xx answer would tombstone, and for an
//     enforced request the key, the owner and the record's identity, each
//     owner computed once (a JWT is verified once). The plan is decided
//     (verdictOf, a pure function): method PRI (an HTTP/2 preface read as
//     HTTP/1.1) and a target in asterisk form are refused before anything
//     else (target.go), never forwarded; an ambiguous form is refused (400
//     ambiguous-request); a request the route does not enforce (method not
//     listed, passthrough mode, no key where the key is optional, a
//     WebSocket upgrade) is proxied untouched, with its header as it came,
//     through httputil.ReverseProxy (passthrough.go); a missing or
//     malformed key, or no owner, is refused (400 or 401), and so is a
//     request with trailers (400 request-trailers: they are in no
//     fingerprint), all before the body is read. Then the body is read
//     once, within max_request_bytes (413; body.go), and the plan resolved
//     with it (Plan.Resolve): the decision a _method member of a form or
//     JSON body may change, a key that is a JSON body member (key.from:
//     body, webhooks), and the fingerprint with the route's recipe; the
//     same judgement follows, on what the body settled.
//  2. Claim (enforce.go, claim). A new keyed request is admitted to the
//     store first (admission.go): past server.max_store_waiting requests
//     waiting for a store answer it gets 503 overloaded at once, with
//     nothing claimed, instead of queueing until the store timeout. A
//     response this instance could not record
//     yet for the same identity is recorded first (pending.go). The
//     identity (owner, scope, key) is then claimed in the store with a new
//     token; while the store has failed recently, takeovers are held back
//     so that a live holder can record its response.
//  3. Decide again (decision.go). decideClaim turns the claim result, the
//     route and the exchange's state into an action, a value: forward,
//     look for a layout 1 record (layout1.go, decideV1), replay, wait, claim
//     again, fingerprint again under the record's recipe, answer with a
//     problem, or handle a store failure; and what becomes of the claim
//     first (kept, released now, released in the background, or completed
//     with a layout 1 record's response). It is pure, so a table test
//     covers every case without a server.
//  4. Act (enforce.go, act). One short loop carries the action out. Forward
//     (forward.go) sends the request upstream once, detached from the
//     client, with a heartbeat that extends the lease, and records the
//     outcome: Complete for a replayable status (with the trailers that
//     followed the body), Release when the upstream surely did not act,
//     nothing when the outcome is unknown. Replay (replay.go) writes the
//     stored response with Idempotent-Replayed, decoded when the retry
//     does not accept its content coding (coding.go), its trailers after
//     the body, and Idempotency-Key-Expires on advertise_expiry routes.
//     Wait (wait.go) sleeps on the store's notification until the record
//     stops running; the waiters of one record in this process share one
//     wait, and a completed record it ends on is their next claim's answer
//     (no second round trip each); otherwise the loop claims again. A wait takes one of the
//     instance's max_waiters slots (waiters.go), and without a free slot
//     the duplicate gets 409 at once instead of holding its connection.
//     How a wait ends is a value too (decision.go, decideWait, table
//     tested): claim again, 409, a store failure, or, when the client
//     left, nothing written (counted as 499). A store failure answers
//     503, or forwards unprotected on a fail_open route.
//
// A request ends once: ServeHTTP defers done, which counts it, sets its
// span's route and outcome and writes its access line, whichever way it
// was answered, also when a broken stream aborts it with
// http.ErrAbortHandler; every step before only sets the exchange's outcome
// and status.
//
// Every error the proxy answers with is a problem of package problem's
// catalog; the kind fixes the status, the title and the metrics outcome
// (problem.go, fail). It is written in the route's shape
// (policy.Route.Problems, the problems.template keys; writeProblem), RFC
// 9457 without one. Logs never carry a key or an owner, only the digest of the
// whole identity (keyHash).
// docs/routing.md, "How a request is handled", says the same for operators.
package proxy
