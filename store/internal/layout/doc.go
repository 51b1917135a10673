// Package layout holds the byte encodings the store drivers share and that
// docs/protocol.md versions: the identity and resource encodings hashed
// into record and index keys, the stored response of layout 3 (Valkey's
// completed record, Postgres's response column), the header encodings and
// the zstd body codec. It is internal to store: callers see records
// through the store.Store contract, never these bytes.
package layout
