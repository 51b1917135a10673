package storetest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// identities are the odd identities every round trip uses.
func identities() []store.Identity {
	long := strings.Repeat("o", 4096)
	return []store.Identity{
		{Owner: "alice", Scope: "POST /orders", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{Owner: "", Scope: "POST /global", Key: "global-scope"},
		{Owner: "a:b", Scope: "c", Key: "d"},
		{Owner: "a", Scope: "b:c", Key: "d"},
		{Owner: "a", Scope: "b", Key: "c:d"},
		{Owner: "{tag}", Scope: "}{", Key: "{}"},
		{Owner: "\x00\xff\xfe", Scope: "\x00", Key: "nul\x00in\x00key"},
		{Owner: "ünïcødé 🔑", Scope: "PATCH /ресурс", Key: "キー"},
		{Owner: long, Scope: "r", Key: "k"},
		{Owner: "o", Scope: "r", Key: ""},
		{Owner: "o\nx", Scope: " r ", Key: "\"quoted\" \\ key"},
	}
}

func (s *suite) testRoundTripIdentity(t *testing.T) {
	st := s.newStore(t)
	suffix := random(4)
	tokens := map[store.Identity]string{}
	fingerprints := map[store.Identity]string{}
	for i, id := range identities() {
		id.Key += suffix // fresh per run, on a shared server
		fp := fmt.Sprintf("fp-%d-\x00\xff-", i) + strings.Repeat("f", 100)
		p := params(id, fp, longLease, time.Hour)
		p.Token = fmt.Sprintf("tok\x00%d\xff", i)
		res := s.mustClaim(t, st, p, store.Claimed)
		if res.Fingerprint != fp {
			t.Fatalf("%q: Claimed fingerprint %q, want %q", id, res.Fingerprint, fp)
		}
		tokens[id], fingerprints[id] = p.Token, fp
	}
	// Only after all claims: identities that differ only in where the
	// separators fall must be distinct records.
	for id, tok := range tokens {
		r := s.mustGet(t, st, id)
		if r == nil || r.Identity != id || r.Token != tok || r.Fingerprint != fingerprints[id] {
			t.Fatalf("Get(%q) = %+v, want identity, token %q and fingerprint %q as given", id, r, tok, fingerprints[id])
		}
		resp := sampleResponse()
		resp.Body = append(resp.Body, id.Owner...)
		s.mustBool(t, "Complete", complete(st, id, tok, resp), true)
		res := s.mustClaim(t, st, params(id, "x", longLease, time.Hour), store.Completed)
		if res.Fingerprint != fingerprints[id] {
			t.Fatalf("Completed fingerprint %q, want %q", res.Fingerprint, fingerprints[id])
		}
		sameResponse(t, fmt.Sprintf("%q", id), res.Response, resp)
	}
}

// testRoundTripRecipe checks that the record keeps the recipe of the claim
// that created it and hands it back in every answer (contract rule 7), so
// a retry made under other fingerprint settings is compared the way its
// first request was.
func (s *suite) testRoundTripRecipe(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	const recipe = "b=json&h=content-type&h=x-%00odd&q=0&v=hs1"
	p := params(id, "fp", longLease, time.Hour)
	p.Recipe = recipe
	if res := s.mustClaim(t, st, p, store.Claimed); res.Recipe != recipe {
		t.Fatalf("Claimed recipe %q, want the caller's %q", res.Recipe, recipe)
	}
	other := params(id, "fp-other", longLease, time.Hour)
	other.Recipe = "b=raw&q=1&v=hs1"
	if res := s.mustClaim(t, st, other, store.Running); res.Recipe != recipe || res.Fingerprint != "fp" {
		t.Fatalf("Running answer = %+v, want the record's recipe %q and fingerprint", res, recipe)
	}
	if r := s.mustGet(t, st, id); r == nil || r.Recipe != recipe {
		t.Fatalf("Get = %+v, want recipe %q", r, recipe)
	}
	s.mustBool(t, "Complete", complete(st, id, p.Token, sampleResponse()), true)
	if res := s.mustClaim(t, st, other, store.Completed); res.Recipe != recipe {
		t.Fatalf("Completed answer recipe %q, want %q", res.Recipe, recipe)
	}
	if r := s.mustGet(t, st, id); r == nil || r.Recipe != recipe {
		t.Fatalf("Get after Complete = %+v, want recipe %q", r, recipe)
	}
}

func (s *suite) testRoundTripResponse(t *testing.T) {
	st := s.newStore(t)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	cases := map[string]store.Response{
		"full":            sampleResponse(),
		"empty body":      {Status: 204, Header: http.Header{"X-A": {"1"}}, Body: []byte{}},
		"nil header":      {Status: 200, Body: []byte("x")},
		"omitted":         {Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Omitted: true},
		"1 MiB binary":    {Status: 200, Body: big},
		"empty value":     {Status: 202, Header: http.Header{"X-Empty": {""}, "X-Two": {"", ""}}},
		"odd header name": {Status: 299, Header: http.Header{"X-\x00Odd:Name": {"v\x00\r\nx"}}},
		// Trailers: kept apart from the header, values in
		// order, with and without a header and a body.
		"trailer": {Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("chunked"),
			Trailer: http.Header{"Grpc-Status": {"0"}, "X-Checksum": {"a", "b, c", ""}, "x-raw": {"kept"}}},
		"trailer only": {Status: 201, Trailer: http.Header{"X-T": {"1"}}},
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			id := newID()
			p := params(id, "fp", longLease, time.Hour)
			s.mustClaim(t, st, p, store.Claimed)
			s.mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
			r := s.mustGet(t, st, id)
			if r == nil || r.State != store.Completed || r.Fingerprint != "fp" || r.Token != "" {
				t.Fatalf("Get = %+v, want completed record without token", r)
			}
			sameResponse(t, "Get", r.Response, resp)
			res := s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
			sameResponse(t, "Claim", res.Response, resp)
			if !res.Response.StoredAt.Equal(r.Response.StoredAt) {
				t.Fatalf("StoredAt differs between Get (%v) and Claim (%v)", r.Response.StoredAt, res.Response.StoredAt)
			}
			if got := res.Response.Header.Values("Set-Cookie"); len(resp.Header.Values("Set-Cookie")) > 0 && len(got) != 2 {
				t.Fatalf("Set-Cookie lines = %q, want two separate values", got)
			}
		})
	}
	// A trailer whose names carry no value has nothing to send: it must
	// not make a completed record unreadable (the Valkey and Postgres
	// layout 3 once flagged an empty trailer field that they then refused
	// on every read).
	t.Run("trailer names without values", func(t *testing.T) {
		id := newID()
		p := params(id, "fp", longLease, time.Hour)
		s.mustClaim(t, st, p, store.Claimed)
		s.mustBool(t, "Complete", complete(st, id, p.Token, store.Response{Status: 200, Body: []byte("x"), Trailer: http.Header{"X-None": nil}}), true)
		r := s.mustGet(t, st, id)
		if r == nil || r.State != store.Completed || string(r.Response.Body) != "x" || len(r.Response.Trailer["X-None"]) != 0 {
			t.Fatalf("Get = %+v, want the completed record, no trailer value", r)
		}
		s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
	})
}

func (s *suite) testCopies(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	p := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	resp := sampleResponse()
	want := sampleResponse()
	s.mustBool(t, "Complete", complete(st, id, p.Token, resp), true)
	// Mutating what was passed in must not reach the store.
	resp.Body[0] = 'X'
	resp.Header.Set("Content-Type", "mutated")
	resp.Header["X-Multi"][0] = "mutated"
	got := s.mustGet(t, st, id)
	sameResponse(t, "after mutating the input", got.Response, want)
	// Nor must mutating what came out.
	got.Response.Body[0] = 'Y'
	got.Response.Header["X-Multi"][0] = "mutated"
	res := s.mustClaim(t, st, params(id, "fp", longLease, time.Hour), store.Completed)
	sameResponse(t, "after mutating the output", res.Response, want)
}

func (s *suite) testGetDelete(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get of a fresh identity = %+v, want nil", r)
	}
	s.mustBool(t, "Delete absent", del(st, id), false)
	p := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, st, p, store.Claimed)
	s.mustBool(t, "Delete running", del(st, id), true)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get after Delete = %+v, want nil", r)
	}
	s.mustBool(t, "Complete after Delete", complete(st, id, p.Token, sampleResponse()), false)
	q := params(id, "fp", longLease, time.Hour)
	if res := s.mustClaim(t, st, q, store.Claimed); res.Takeover {
		t.Fatal("Claim after Delete answered Takeover")
	}
	s.mustBool(t, "Complete", complete(st, id, q.Token, sampleResponse()), true)
	s.mustBool(t, "Delete completed", del(st, id), true)
	s.mustBool(t, "Delete again", del(st, id), false)
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("Get after Delete = %+v, want nil", r)
	}
}
