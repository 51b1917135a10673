package identity

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// ownerListPrefix marks an owner made of several sources (OwnerList). No
// single source produces it, so a list owner never equals a single one.
const ownerListPrefix = "m:"

// ownerListBytesPrefix marks, inside an OwnerList owner, a part that is not
// valid UTF-8, given as hex (see ListOwner).
const ownerListBytesPrefix = "b:"

// ParseOwnerSources parses an `owner:` setting given as a list of sources
// (each as ParseOwnerSource takes it). One source is that source, so
// `owner: [authorization]` and `owner: authorization` store the same
// owners. Several make an OwnerList: none is refused in a list (it means
// "no owner", so the list would be another source under another name), a
// list within a list cannot be written, and a source given twice is
// refused (it adds nothing and would make two spellings of one owner).
func ParseOwnerSources(list []string) (OwnerSource, error) {
	switch len(list) {
	case 0:
		return OwnerSource{}, errors.New("is an empty list; give a source such as authorization, or a list of them")
	case 1:
		return ParseOwnerSource(strings.TrimSpace(list[0]))
	}
	out := OwnerSource{Kind: OwnerList}
	for i, s := range list {
		o, err := ParseOwnerSource(strings.TrimSpace(s))
		if err != nil {
			return OwnerSource{}, fmt.Errorf("[%d]: %w", i, err)
		}
		if o.Kind == OwnerNone {
			return OwnerSource{}, fmt.Errorf("[%d]: none cannot be part of an owner list: a list names the sources that together identify a principal", i)
		}
		for _, prev := range out.Parts {
			if prev.String() == o.String() {
				return OwnerSource{}, fmt.Errorf("[%d]: %s is listed twice", i, o)
			}
		}
		out.Parts = append(out.Parts, o)
	}
	return out, nil
}

// Uses reports whether o is k or, for an OwnerList, has a part of kind k:
// what a source needs (a jwt: section, verified client certificates)
// a list that contains it needs too.
func (o OwnerSource) Uses(k OwnerKind) bool {
	if o.Kind == k {
		return true
	}
	return slices.ContainsFunc(o.Parts, func(p OwnerSource) bool { return p.Kind == k })
}

// ListOwner joins the owners of the parts of an OwnerList, in the order
// the list gives them, into one owner: "m:" + the JSON array of the parts'
// owners (each as its single source stores it: h:VALUE, sha256:HEX, j:[...],
// cert:HEX). JSON quoting makes the join unambiguous: no two different
// tuples of part owners give one value, whatever bytes a header carries.
// A part that is not valid UTF-8 (a header value with obs-text, RFC 9110
// section 5.5) enters as "b:" + the lowercase hex of its bytes, because
// encoding/json would turn every invalid byte into U+FFFD and make
// "h:acct_\xff" and "h:acct_\xfe" one owner
// (TestListOwnerKeepsNonUTF8HeaderValuesApart). No single source's owner
// starts with "b:", and UTF-8 parts enter as before, so owners stored
// earlier keep matching.
func ListOwner(parts []string) (string, error) {
	enc := parts
	for i, p := range parts {
		if utf8.ValidString(p) {
			continue
		}
		if &enc[0] == &parts[0] {
			enc = slices.Clone(parts)
		}
		enc[i] = ownerListBytesPrefix + hex.EncodeToString([]byte(p))
	}
	b, err := json.Marshal(enc)
	if err != nil {
		return "", fmt.Errorf("encoding owner parts: %w", err)
	}
	return ownerListPrefix + string(b), nil
}

// listOwner is Of for an OwnerList: every part must yield its owner, or
// the request has none (ErrOwnerMissing or ErrInvalidCredentials, naming
// the part), never an owner made of fewer parts.
func (o OwnerSource) listOwner(req *http.Request, v *JWTVerifier) (string, error) {
	parts := make([]string, len(o.Parts))
	for i, src := range o.Parts {
		owner, err := src.single(req, v)
		if err != nil {
			return "", fmt.Errorf("owner part %s: %w", src, err)
		}
		parts[i] = owner
	}
	return ListOwner(parts)
}

// listFromValue is FromValue for an OwnerList: raw is a JSON
// array with one raw value per part, in the list's order, each what
// FromValue takes for that source alone (a string; for a jwt part the
// JSON array of its claims' values).
func (o OwnerSource) listFromValue(raw string, claims []string) (string, error) {
	var values []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &values); err != nil {
		return "", fmt.Errorf("owner_value must be a JSON array of one raw value per owner source %s: %w", o, err)
	}
	if len(values) != len(o.Parts) {
		return "", fmt.Errorf("owner_value has %d values, the route's owner %s has %d sources", len(values), o, len(o.Parts))
	}
	parts := make([]string, len(values))
	for i, src := range o.Parts {
		v := string(values[i])
		if src.Kind != OwnerJWT {
			var s string
			if err := json.Unmarshal(values[i], &s); err != nil {
				return "", fmt.Errorf("owner_value[%d] (%s) must be a string: %w", i, src, err)
			}
			v = s
		}
		owner, err := src.FromValue(v, claims)
		if err != nil {
			return "", fmt.Errorf("owner_value[%d] (%s): %w", i, src, err)
		}
		parts[i] = owner
	}
	return ListOwner(parts)
}

// listString is String of an OwnerList: its sources as a YAML flow list.
func (o OwnerSource) listString() string {
	s := make([]string, len(o.Parts))
	for i, p := range o.Parts {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}
