// Package policy decides, per request, whether and how idempotency is
// enforced: which route of the configuration governs the request, with
// which settings, or why the request must be refused before anything
// reaches the upstream.
//
// It promises:
//
//   - A request is never let through under a weaker route than one of the
//     forms the upstream, or a normalizing hop in front of it, may execute
//     it in. Policy.Decide considers its path variants (decoded, case,
//     trailing slash, ";" parameters, extensions) and method variants
//     (overrides in headers, the query, a form or a JSON body): a stricter
//     route governing a variant governs the request, and a tie it cannot
//     settle refuses it (Decision.Refuse).
//   - Routes that overlap are found when the config is compiled (New):
//     patterns that conflict, routes of one key scope that would let one
//     owner's records reach another, and settings no store could keep are
//     errors (*FieldError, every one at once), so a config that loads is
//     one whose decisions are well defined.
//   - A request in canonical form pays for one ServeMux match: New
//     precomputes which routes could govern a variant (overlaps.go), and
//     Decide only looks further when one could.
//   - A compiled Policy is immutable and safe for concurrent use; a reload
//     builds a new one.
//
// Who calls what: package config builds a Policy with New from the file;
// idemgate validate and policy print it with Describe. For every request
// the proxy calls Policy.Ask with the request as the upstream will get
// it (the route decision and, from the header, the tombstone rules, the
// key, the owner and the record identity) and, once it has read the body,
// Plan.Resolve (the decision a _method member may change, a key in the
// body, the fingerprint). The admin API and idemgate init --check call Decide and
// Route's owner helpers.
//
// What a route settles lives in two packages of its own, which import
// nothing of this one: package identity (the idempotency key, the owner,
// JWT verification and the record's identity and scope) and package
// fingerprint (whether a retry is the same request). A Route holds their
// settings (Route.Key, Route.Owner, Route.JWT, Route.Fingerprint), New
// validates them, and Route.KeyOf, Route.OwnerOf and Route.FingerprintOf
// apply them.
package policy
