package postgres

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestReadsLayout2Rows builds a table exactly as the last build before layout 3
// left it (no response column) with rows of layout 2 written by raw SQL,
// as that build's statements write them, then opens it with this build:
// the migration adds the response column, the completed row replays byte
// for byte, the running row completes in layout 3 (body compressed, the
// layout 2 columns NULL, so a layout 2 build refuses it instead of
// replaying nothing), and a layout 2 row that still carries a response
// column (an earlier build's claim does not clear it during a rolling
// upgrade) answers from its layout 2 columns.
func TestReadsLayout2Rows(t *testing.T) {
	srv := pgtest.Start(t)
	table := freshTable()
	ddl, err := Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl[len(ddl)-1], "ADD COLUMN IF NOT EXISTS response bytea") {
		t.Fatalf("last DDL statement = %q, want the response column", ddl[len(ddl)-1])
	}
	for _, stmt := range ddl[:len(ddl)-1] { // the DDL of the last build before layout 3
		srv.Exec(stmt)
	}
	q, _ := QuoteTable(table)
	p, resp := storetest.BenchRecord(7)
	resp.Trailer = http.Header{"Grpc-Status": {"0"}}
	// Over layout.MinCompressBytes, so that this build's completion is a
	// compressed layout 3 response.
	resp.Body = bytes.Repeat(resp.Body, 3)
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, created, expiry, retention_ms,
  status, headers, body, omitted, stored_at, version, trailers)
VALUES ($1, $2, $3, $4, 2, $5, $6, now(), now() + interval '1 hour', 3600000, 201, $7, $8, false, now(), 2, $9)`,
		ID(p.Identity), []byte(p.Identity.Owner), []byte(p.Identity.Scope), []byte(p.Identity.Key), []byte(p.Fingerprint), []byte(p.Recipe),
		layout.EncodeHeader(resp.Header), resp.Body, layout.EncodeHeader(resp.Trailer))
	running := store.Identity{Owner: "o", Scope: "default", Key: "running"}
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, token, created, lease_end, expiry, retention_ms, version)
VALUES ($1, 'o', 'default', 'running', 1, 'fp', '', 'tok', now(), now() + interval '1 minute', now() + interval '1 hour', 3600000, 2)`, ID(running))

	if _, err := New(testCtx(t), Options{DSN: srv.DSN(), Table: table, NoCreate: true}); err == nil || !strings.Contains(err.Error(), "idemgate migrate") {
		t.Fatalf("New with NoCreate on a table without the response column = %v; want an error naming idemgate migrate", err)
	}
	if _, err := Migrate(testCtx(t), Options{DSN: srv.DSN(), Table: table}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s := open(t, Options{DSN: srv.DSN(), Table: table, SweepInterval: -1})
	ctx := testCtx(t)

	res, err := s.Claim(ctx, store.ClaimParams{Identity: p.Identity, Fingerprint: p.Fingerprint, Token: "t", Lease: time.Minute})
	if err != nil || res.State != store.Completed || res.Fingerprint != p.Fingerprint || res.Recipe != p.Recipe || res.Response == nil {
		t.Fatalf("Claim of a layout 2 row = %+v, %v", res, err)
	}
	got := *res.Response
	got.StoredAt = time.Time{}
	if !reflect.DeepEqual(got, resp) {
		t.Fatalf("replay of a layout 2 row:\n got %+v\nwant %+v", got, resp)
	}

	if ok, err := s.Complete(ctx, running, "tok", resp); !ok || err != nil {
		t.Fatalf("Complete of a layout 2 running row = %v, %v", ok, err)
	}
	r, err := s.Get(ctx, running)
	if err != nil || r == nil || r.State != store.Completed {
		t.Fatalf("Get after Complete = %+v, %v", r, err)
	}
	got = *r.Response
	got.StoredAt = time.Time{}
	if !reflect.DeepEqual(got, resp) {
		t.Fatalf("Get after Complete:\n got %+v\nwant %+v", got, resp)
	}
	if n, err := srv.QueryInt("postgres", `SELECT count(*) FROM `+q+` WHERE id = $1 AND version = 3 AND status IS NULL
  AND headers IS NULL AND body IS NULL AND omitted IS NULL AND trailers IS NULL AND get_byte(response, 0) & $2 <> 0`,
		ID(running), int(layout.RespBodyZstd)); err != nil || n != 1 {
		t.Fatalf("row completed by this build: %d rows of layout 3 with a compressed response, %v; want 1", n, err)
	}

	// A layout 2 row with a stale response column answers from its
	// layout 2 columns.
	stale := store.Identity{Owner: "o", Scope: "default", Key: "stale"}
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, created, expiry, retention_ms,
  status, headers, body, omitted, stored_at, version, response)
VALUES ($1, 'o', 'default', 'stale', 2, 'fp', '', now(), now() + interval '1 hour', 3600000, 200, ''::bytea, 'second', false, now(), 2, $2)`,
		ID(stale), layout.EncodeResponse(s.codec, store.Response{Status: 201, Body: []byte("first")}))
	r, err = s.Get(ctx, stale)
	if err != nil || r == nil || r.Response == nil || r.Response.Status != 200 || string(r.Response.Body) != "second" {
		t.Fatalf("Get of a layout 2 row with a stale response column = %+v, %v; want 200 second", r, err)
	}

	// A row of a layout this build does not know is a store error, never
	// a guess (a later build's row read during a downgrade).
	future := store.Identity{Owner: "o", Scope: "default", Key: "future"}
	srv.Exec(`INSERT INTO `+q+` (id, owner, scope, key, state, fingerprint, recipe, created, expiry, retention_ms,
  stored_at, version, response)
VALUES ($1, 'o', 'default', 'future', 2, 'fp', '', now(), now() + interval '1 hour', 3600000, now(), 4, $2)`,
		ID(future), layout.EncodeResponse(s.codec, store.Response{Status: 201, Body: []byte("x")}))
	if r, err := s.Get(ctx, future); !errors.Is(err, store.ErrUnavailable) || r != nil {
		t.Fatalf("Get of a layout 4 row = %+v, %v; want an error wrapping ErrUnavailable", r, err)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: future, Fingerprint: "fp", Token: "t", Lease: time.Minute}); !errors.Is(err, store.ErrUnavailable) || res.State == store.Claimed {
		t.Fatalf("Claim of a layout 4 row = %+v, %v; want an error wrapping ErrUnavailable", res, err)
	}
}

// TestResponseColumnRoundTrip checks layout.EncodeResponse and DecodeResponse on
// the shapes a response takes, and that a corrupt column is an error.
func TestResponseColumnRoundTrip(t *testing.T) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_700_000_000_000)
	for name, resp := range map[string]store.Response{
		"bench":              {Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: storetest.BenchBody},
		"encoded":            {Status: 200, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: storetest.BenchBody},
		"nil header, body":   {Status: 204, Omitted: true},
		"empty header, body": {Status: 200, Header: http.Header{}, Body: []byte{}},
		"trailers":           {Status: 200, Body: []byte("x"), Trailer: http.Header{"Grpc-Status": {"0"}}},
	} {
		resp.StoredAt = at
		b := layout.EncodeResponse(codec, resp)
		_, z := codec.Compress(resp.Header, resp.Body)
		if resp.Body != nil && (b[0]&layout.RespBodyZstd != 0) != z {
			t.Errorf("%s: compressed flag %v, want %v", name, b[0]&layout.RespBodyZstd != 0, z)
		}
		got, err := layout.DecodeResponse(codec, b, at)
		if err != nil || !reflect.DeepEqual(*got, resp) {
			t.Errorf("%s: round trip = %+v, %v; want %+v", name, got, err, resp)
		}
	}
	good := layout.EncodeResponse(codec, store.Response{Status: 201, Header: http.Header{"A": {"b"}}, Body: storetest.BenchBody})
	for name, b := range map[string][]byte{
		"empty":          {},
		"unknown flag":   append([]byte{good[0] | 0x80}, good[1:]...),
		"bad status":     {layout.RespBodySet, 0x05},
		"truncated":      good[:4],
		"corrupt frame":  append(append([]byte{}, good[:len(good)-20]...), make([]byte, 20)...),
		"zstd, no body":  {layout.RespBodyZstd, 0xc8, 1},
		"bytes, no body": {0, 200, 1, 'x'},
	} {
		if r, err := layout.DecodeResponse(codec, b, at); err == nil {
			t.Errorf("%s: decodeResponse = %+v, want an error", name, r)
		}
	}
}
