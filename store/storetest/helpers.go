package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

const (
	// longLease is a lease no subtest outlives.
	longLease = time.Minute
	// shortLease is the lease of subtests that wait for one to end.
	shortLease = 100 * time.Millisecond
	// shortRetention is the retention of subtests that wait for one to end
	// but first work with the record: on a real clock (Valkey's) it must
	// outlive the round trips between the write and the last operation
	// that must still find it, on a machine loaded by other test packages
	// (150 and 200 ms did not always).
	shortRetention = 2 * time.Second
	// wakeTimeout bounds how long a watcher may take to be woken.
	wakeTimeout = 3 * time.Second
	// quietWindow is how long a watcher must stay asleep to count as not woken.
	quietWindow = 200 * time.Millisecond
	// opTimeout bounds every store call of the suite.
	opTimeout = 10 * time.Second
)

func (s *suite) newStore(t *testing.T) store.Store {
	t.Helper()
	st := s.h.NewStore(t, s.clock)
	if st == nil {
		t.Fatal("storetest: NewStore returned nil")
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (s *suite) peer(t *testing.T, st store.Store) store.Store {
	t.Helper()
	if s.h.NewPeer == nil {
		t.Skip("storetest: store is not shared between instances (Harness.NewPeer is nil)")
	}
	p := s.h.NewPeer(t, st, s.clock)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// elapse makes d pass on the store's clock: advances an injected clock, or
// sleeps d plus a margin for millisecond truncation on a real clock.
func (s *suite) elapse(d time.Duration) {
	if s.clock != nil {
		s.clock.Advance(d)
		return
	}
	time.Sleep(d + 5*time.Millisecond)
}

// background is the context every store call of the suite derives from:
// Harness.Context's, or context.Background.
func (s *suite) background() context.Context {
	if s.h.Context == nil {
		return context.Background()
	}
	return s.h.Context(context.Background())
}

func (s *suite) ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(s.background(), opTimeout)
	t.Cleanup(cancel)
	return c
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newID() store.Identity {
	return store.Identity{Owner: "owner-" + random(4), Scope: "POST /orders", Key: "key-" + random(8)}
}

func newToken() string { return "tok-" + random(12) }

func params(id store.Identity, fp string, lease, retention time.Duration) store.ClaimParams {
	return store.ClaimParams{Identity: id, Fingerprint: fp, Token: newToken(), Lease: lease, Retention: retention}
}

func (s *suite) mustClaim(t *testing.T, st store.Store, p store.ClaimParams, want store.State) store.ClaimResult {
	t.Helper()
	res, err := st.Claim(s.ctx(t), p)
	if err != nil {
		t.Fatalf("Claim(%+v): %v", p.Identity, err)
	}
	if res.State != want {
		t.Fatalf("Claim(%+v) state = %v, want %v (result %+v)", p.Identity, res.State, want, res)
	}
	return res
}

func (s *suite) mustGet(t *testing.T, st store.Store, id store.Identity) *store.Record {
	t.Helper()
	r, err := st.Get(s.ctx(t), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

type boolOp func(context.Context) (bool, error)

func (s *suite) mustBool(t *testing.T, what string, op boolOp, want bool) {
	t.Helper()
	got, err := op(s.ctx(t))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func complete(st store.Store, id store.Identity, tok string, resp store.Response) boolOp {
	return func(c context.Context) (bool, error) { return st.Complete(c, id, tok, resp) }
}

func release(st store.Store, id store.Identity, tok string) boolOp {
	return func(c context.Context) (bool, error) { return st.Release(c, id, tok) }
}

func extend(st store.Store, id store.Identity, tok string, lease time.Duration) boolOp {
	return func(c context.Context) (bool, error) { return st.Extend(c, id, tok, lease) }
}

func del(st store.Store, id store.Identity) boolOp {
	return func(c context.Context) (bool, error) { return st.Delete(c, id) }
}

func sampleResponse() store.Response {
	h := http.Header{}
	h.Add("Content-Type", "application/octet-stream")
	h.Add("X-Multi", "first")
	h.Add("X-Multi", "second, with comma")
	h.Add("X-Multi", "")
	h.Add("Set-Cookie", "a=1; Path=/; HttpOnly")
	h.Add("Set-Cookie", "b=2; Expires=Wed, 21 Oct 2015 07:28:00 GMT")
	h["x-raw-lowercase"] = []string{"kept as given"}
	return store.Response{
		Status: 201,
		Header: h,
		Body:   []byte("binary\x00body\xff\xfe\x80 not utf-8 \r\n\x00"),
	}
}

// sameResponse fails unless got equals want except for StoredAt.
func sameResponse(t *testing.T, what string, got *store.Response, want store.Response) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: response is nil", what)
	}
	if got.Status != want.Status || got.Omitted != want.Omitted {
		t.Fatalf("%s: status/omitted = %d/%v, want %d/%v", what, got.Status, got.Omitted, want.Status, want.Omitted)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("%s: body = %q, want %q", what, got.Body, want.Body)
	}
	if len(got.Header) != 0 || len(want.Header) != 0 {
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%s: header = %#v, want %#v", what, got.Header, want.Header)
		}
	}
	if len(got.Trailer) != 0 || len(want.Trailer) != 0 {
		if !reflect.DeepEqual(got.Trailer, want.Trailer) {
			t.Fatalf("%s: trailer = %#v, want %#v", what, got.Trailer, want.Trailer)
		}
	}
	if got.StoredAt.IsZero() || !got.StoredAt.Equal(got.StoredAt.Truncate(time.Millisecond)) {
		t.Fatalf("%s: StoredAt = %v, want a non-zero time truncated to milliseconds", what, got.StoredAt)
	}
}
