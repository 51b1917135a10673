// Package fingerprint decides whether a retry is the same request as the
// one that claimed its idempotency key. The same fingerprint gets the
// stored response replayed; a different one is a key reused for another
// request (422).
//
// It promises:
//
//   - A fingerprint is "hs1:" and the SHA-256 of an injective encoding
//     (Encoding) of what a Spec selects: method, escaped path, the query
//     when asked, the configured headers, and the body as raw bytes,
//     canonical JSON (RFC 8785, with fingerprint.exclude members removed),
//     canonical protobuf messages (BodyProtobuf, decoded with a
//     ProtoSchema) or nothing. Two requests that differ in anything
//     selected never share a fingerprint.
//   - The hs1 format is frozen (docs/protocol.md, "Request fingerprint
//     (hs1)", pinned by testdata/fingerprint_vectors.json): stored records
//     compare fingerprints across releases and instances, so a change is a
//     new prefix, never an edit.
//   - Every record keeps the recipe its fingerprint was made with
//     (Spec.Recipe). A retry is compared by that recipe (ParseRecipe),
//     even after the route's settings changed, and a recipe this build
//     cannot follow is ErrRecipeUnknown, never a guess.
//   - A canonical form is used only when it is lossless: a JSON body with
//     a number JSON cannot carry exactly, or a protobuf message the
//     descriptors cannot hold exactly, is fingerprinted by its bytes.
//
// Who calls what: package policy holds a route's Spec (Route.Fingerprint)
// and validates it when it compiles a config; the proxy calls
// Route.FingerprintOf (Spec.Of) once per keyed request, Spec.CheckBody
// before it claims a key, and ParseRecipe and Spec.Of again when a record
// was written under another recipe. The store keeps the fingerprint and
// the recipe and never interprets either. Of and Encoding take explicit
// inputs (Input), so test vectors and fuzzing need no *http.Request.
package fingerprint
