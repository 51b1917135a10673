package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func (s *suite) testDoneContext(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	held := params(id, "fp", longLease, time.Hour)
	s.mustClaim(t, st, held, store.Claimed)
	canceled, cancel := context.WithCancel(s.background())
	cancel()
	expired, cancel2 := context.WithDeadline(s.background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"canceled", canceled, context.Canceled}, {"deadline", expired, context.DeadlineExceeded}} {
		fresh := newID()
		check := func(op string, err error) {
			t.Helper()
			if err == nil || !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, c.want) {
				t.Fatalf("%s with %s context: err = %v, want it to wrap ErrUnavailable and %v", op, c.name, err, c.want)
			}
		}
		res, err := st.Claim(c.ctx, params(fresh, "fp", longLease, time.Hour))
		check("Claim", err)
		if res.State == store.Claimed {
			t.Fatalf("Claim with %s context answered Claimed", c.name)
		}
		_, err = st.Complete(c.ctx, id, held.Token, sampleResponse())
		check("Complete", err)
		_, err = st.Release(c.ctx, id, held.Token)
		check("Release", err)
		_, err = st.Extend(c.ctx, id, held.Token, longLease)
		check("Extend", err)
		_, err = st.Get(c.ctx, id)
		check("Get", err)
		_, err = st.Delete(c.ctx, id)
		check("Delete", err)
		check("Ping", st.Ping(c.ctx))
		if r := s.mustGet(t, st, fresh); r != nil {
			t.Fatalf("Claim with %s context left a record: %+v", c.name, r)
		}
	}
	if r := s.mustGet(t, st, id); r == nil || r.State != store.Running || r.Token != held.Token {
		t.Fatalf("record changed by calls with done contexts: %+v", r)
	}
}

func (s *suite) testPing(t *testing.T) {
	st := s.newStore(t)
	if err := st.Ping(s.ctx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// testInvalidParams: every store rejects the claim parameters and the
// Extend leases that store.ClaimParams.Validate and store.ValidateLease
// reject, with an error wrapping store.ErrInvalid and not
// store.ErrUnavailable (a caller bug, not a store failure), and changes
// nothing; the bounds themselves are accepted. Bolt once answered Claimed
// to an empty token, a lease under 1 ms and a negative retention.
func (s *suite) testInvalidParams(t *testing.T) {
	st := s.newStore(t)
	wantInvalid := func(what string, err error) {
		t.Helper()
		if err == nil || !errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s: err = %v, want an error wrapping ErrInvalid and not ErrUnavailable", what, err)
		}
	}
	id := newID()
	valid := params(id, "fp", longLease, time.Hour)
	for name, change := range map[string]func(p *store.ClaimParams){
		"empty token":        func(p *store.ClaimParams) { p.Token = "" },
		"zero lease":         func(p *store.ClaimParams) { p.Lease = 0 },
		"sub-ms lease":       func(p *store.ClaimParams) { p.Lease = time.Millisecond - time.Nanosecond },
		"negative lease":     func(p *store.ClaimParams) { p.Lease = -time.Second },
		"negative retention": func(p *store.ClaimParams) { p.Retention = -time.Millisecond },
		"long fingerprint":   func(p *store.ClaimParams) { p.Fingerprint = strings.Repeat("f", store.MaxFingerprintBytes+1) },
		"long recipe":        func(p *store.ClaimParams) { p.Recipe = strings.Repeat("r", store.MaxRecipeBytes+1) },
	} {
		p := valid
		change(&p)
		res, err := st.Claim(s.ctx(t), p)
		wantInvalid("Claim with "+name, err)
		if res.State == store.Claimed {
			t.Fatalf("Claim with %s answered Claimed", name)
		}
	}
	if r := s.mustGet(t, st, id); r != nil {
		t.Fatalf("rejected claims left a record: %+v", r)
	}
	// The bounds are valid.
	edge := params(id, strings.Repeat("f", store.MaxFingerprintBytes), time.Millisecond, 0)
	edge.Recipe = strings.Repeat("r", store.MaxRecipeBytes)
	s.mustClaim(t, st, edge, store.Claimed)
	s.mustBool(t, "Extend by 1ms", extend(st, id, edge.Token, time.Millisecond), true)
	s.mustBool(t, "Extend", extend(st, id, edge.Token, longLease), true)
	before := s.mustGet(t, st, id)
	for _, lease := range []time.Duration{0, time.Millisecond - time.Nanosecond, -time.Second} {
		ok, err := st.Extend(s.ctx(t), id, edge.Token, lease)
		wantInvalid(fmt.Sprintf("Extend by %v", lease), err)
		if ok {
			t.Fatalf("Extend by %v answered true", lease)
		}
	}
	if after := s.mustGet(t, st, id); !reflect.DeepEqual(before, after) {
		t.Fatalf("record changed by rejected Extends:\nbefore %+v\nafter  %+v", before, after)
	}
}
