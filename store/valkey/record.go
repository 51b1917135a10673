package valkey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/valkey-io/valkey-go"
)

// Key returns the record key of id under prefix: prefix + "{" + lowercase
// hex SHA-256 of IdentityBytes(id) + "}". The braces make the whole digest
// the Cluster hash tag.
func Key(prefix string, id store.Identity) string {
	// The identity's bytes and the digest's hex stay on the stack (the
	// former unless the identity is longer than buf): Key runs two or
	// three times per keyed request, and the key string is its one
	// allocation (TestKeyAllocatesOnce).
	var buf [256]byte
	sum := sha256.Sum256(layout.AppendIdentity(buf[:0], id))
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	var b strings.Builder
	b.Grow(len(prefix) + len(h) + 2)
	b.WriteString(prefix)
	b.WriteByte('{')
	b.Write(h[:])
	b.WriteByte('}')
	return b.String()
}

// IdentityBytes is the encoding of id that Key hashes, the one every
// store shares (docs/protocol.md, "Key layout").
func IdentityBytes(id store.Identity) []byte { return layout.IdentityBytes(id) }

// Key returns the record key of id in this store (see the package func Key).
func (s *Store) Key(id store.Identity) string { return Key(s.prefix, id) }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func msTime(v string) (time.Time, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q: %w", v, err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(n), nil
}

func msOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func replyStrings(res valkey.ValkeyResult) ([]string, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(arr))
	for i := range arr {
		if arr[i].IsNil() {
			continue
		}
		if out[i], err = arr[i].ToString(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseClaim parses claim.lua's answer to the claim of id. A completed
// record that names another identity (only a SHA-256 collision or a key
// written by hand puts one under id's key) is an error, never a replay:
// the claim fails closed, as Get and the replay cache do (errOtherIdentity).
func parseClaim(codec *layout.BodyCodec, id store.Identity, res valkey.ValkeyResult) (store.ClaimResult, bool, error) {
	out, err := parseClaimReply(codec, id, res)
	return out.ClaimResult, out.layout4, err
}

// errOtherIdentity is the error of a read that found another identity's
// record under the key of the one asked for.
var errOtherIdentity = errors.New("the record key holds another identity")

// claimReply is claim.lua's answer: the result, and whether a completed
// record is of layout 4 (a string; the replay cache reads it so).
type claimReply struct {
	store.ClaimResult
	layout4 bool
}

func parseClaimReply(codec *layout.BodyCodec, id store.Identity, res valkey.ValkeyResult) (claimReply, error) {
	v, err := replyStrings(res)
	if err != nil {
		return claimReply{}, fmt.Errorf("claim reply: %w", err)
	}
	// Built only on failure: formatting a completed reply quotes the whole
	// stored response, which cost more than the rest of Claim.
	bad := func() error { return fmt.Errorf("claim reply %q: unexpected shape", v) }
	if len(v) == 1 && v[0] == "gone" {
		// A tombstone: nothing but the state.
		return claimReply{ClaimResult: store.ClaimResult{State: store.Gone}}, nil
	}
	if len(v) == 3 && v[0] == "completed4" {
		e, err := strconv.ParseInt(v[2], 10, 64)
		if err != nil {
			return claimReply{}, bad()
		}
		r, err := parseRecord4(codec, 0, v[1], e)
		if err != nil {
			return claimReply{}, err
		}
		if r.Identity != id {
			return claimReply{}, errOtherIdentity
		}
		return claimReply{store.ClaimResult{State: store.Completed, Fingerprint: r.Fingerprint, Recipe: r.Recipe, Response: r.Response}, true}, nil
	}
	if len(v) == 2 && v[0] == "completed" {
		// Layout 3: the whole record in one string.
		c, err := decodeCompact([]byte(v[1]))
		if err != nil {
			return claimReply{}, err
		}
		if (store.Identity{Owner: c.owner, Scope: c.scope, Key: c.key}) != id {
			return claimReply{}, errOtherIdentity
		}
		resp, err := c.response(codec)
		if err != nil {
			return claimReply{}, err
		}
		return claimReply{ClaimResult: store.ClaimResult{State: store.Completed, Fingerprint: c.fingerprint, Recipe: c.recipe, Response: resp}}, nil
	}
	// The recipe is last in every reply but the completed one (whose
	// trailers follow it); a layout 1 record has none (nil).
	if len(v) < 4 {
		return claimReply{}, bad()
	}
	recipe := v[len(v)-1]
	switch v[0] {
	case "claimed", "running", "abandoned":
		lease, err := msTime(v[2])
		if err != nil {
			return claimReply{}, err
		}
		out := store.ClaimResult{Fingerprint: v[1], Recipe: recipe, LeaseEnd: lease}
		switch v[0] {
		case "claimed":
			if len(v) != 5 {
				return claimReply{}, bad()
			}
			out.State, out.Takeover = store.Claimed, v[3] == "1"
		case "running":
			if len(v) != 4 {
				return claimReply{}, bad()
			}
			out.State = store.Running
		default:
			if len(v) != 4 {
				return claimReply{}, bad()
			}
			out.State = store.Abandoned
		}
		return claimReply{ClaimResult: out}, nil
	case "completed":
		if len(v) != 9 {
			return claimReply{}, bad()
		}
		resp, err := decodeResponse(v[2], v[3], v[4], v[5], v[6], v[8])
		if err != nil {
			return claimReply{}, err
		}
		return claimReply{ClaimResult: store.ClaimResult{State: store.Completed, Fingerprint: v[1], Recipe: v[7], Response: resp}}, nil
	}
	return claimReply{}, bad()
}

// parseFields reads a record from its hash fields f; nowMs (server time,
// unix ms) tells a running record from an abandoned one.
func parseFields(codec *layout.BodyCodec, nowMs int64, f map[string]string) (*store.Record, error) {
	now := time.UnixMilli(nowMs)
	var err error
	if v, ok := f[v4Field]; ok {
		e, err := strconv.ParseInt(f[v4Expiry], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad expiry %q", errRecord4, f[v4Expiry])
		}
		return parseRecord4(codec, nowMs, v, e)
	}
	if pn, ok := f["pn"]; ok && f["s"] == "completed" {
		return parseCompactRecord(codec, f, pn)
	}
	r := &store.Record{
		Identity:    store.Identity{Owner: f["o"], Scope: f["r"], Key: f["k"]},
		Fingerprint: f["f"],
		Recipe:      f["fr"],
	}
	if r.CreatedAt, err = msTime(f["c"]); err != nil {
		return nil, err
	}
	if r.RetentionEnd, err = msTime(f["x"]); err != nil {
		return nil, err
	}
	switch f["s"] {
	case "completed":
		r.State = store.Completed
		if r.Response, err = decodeResponse(f["st"], f["h"], f["b"], f["om"], f["sa"], f["tr"]); err != nil {
			return nil, err
		}
	case "running":
		r.Token = f["t"]
		if r.LeaseEnd, err = msTime(f["l"]); err != nil {
			return nil, err
		}
		r.State = store.Running
		if !r.LeaseEnd.After(now) {
			r.State = store.Abandoned
		}
	case "gone":
		// A tombstone (tombstone.lua) keeps only its identity, c and x.
		r.State = store.Gone
	default:
		return nil, fmt.Errorf("record state %q", f["s"])
	}
	return r, nil
}

func decodeResponse(status, header, body, omitted, storedAt, trailer string) (*store.Response, error) {
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, fmt.Errorf("bad status %q: %w", status, err)
	}
	h, err := layout.DecodeHeader([]byte(header))
	if err != nil {
		return nil, err
	}
	at, err := msTime(storedAt)
	if err != nil {
		return nil, err
	}
	resp := &store.Response{Status: code, Header: h, Body: []byte(body), Omitted: omitted == "1", StoredAt: at}
	if trailer != "" {
		if resp.Trailer, err = layout.DecodeHeader([]byte(trailer)); err != nil {
			return nil, fmt.Errorf("trailers: %w", err)
		}
	}
	return resp, nil
}

// EncodeHeader is layout.EncodeHeader, the encoding of the record's "h"
// and "tr" fields, kept under this name for callers outside the store
// packages that build records by hand (the e2e tests).
func EncodeHeader(h http.Header) []byte { return layout.EncodeHeader(h) }

// DecodeHeader is layout.DecodeHeader: it reverses EncodeHeader, no bytes
// decode to a nil header, and truncated input is an error.
func DecodeHeader(b []byte) (http.Header, error) { return layout.DecodeHeader(b) }

// parseCompactRecord reads a completed record of layout 3 from its fields:
// the record is p0 .. p(pn-1) joined, its end is x.
func parseCompactRecord(codec *layout.BodyCodec, f map[string]string, pn string) (*store.Record, error) {
	n, err := strconv.Atoi(pn)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%w: pn %q", errCompact, pn)
	}
	var b []byte
	for i := range n {
		p, ok := f["p"+strconv.Itoa(i)]
		if !ok {
			return nil, fmt.Errorf("%w: field p%d missing", errCompact, i)
		}
		b = append(b, p...)
	}
	c, err := decodeCompact(b)
	if err != nil {
		return nil, err
	}
	r := &store.Record{
		Identity:    store.Identity{Owner: c.owner, Scope: c.scope, Key: c.key},
		State:       store.Completed,
		Fingerprint: c.fingerprint,
		Recipe:      c.recipe,
		CreatedAt:   msOrZero(c.createdMs),
	}
	if r.RetentionEnd, err = msTime(f["x"]); err != nil {
		return nil, err
	}
	if r.Response, err = c.response(codec); err != nil {
		return nil, err
	}
	return r, nil
}
