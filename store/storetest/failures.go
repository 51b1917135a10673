package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func (s *suite) testDoneContext(t *testing.T) {
	st := s.newStore(t)
	id := newID()
	held := params(id, "fp", longLease, time.Hour)
	mustClaim(t, st, held, store.Claimed)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
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
		if r := mustGet(t, st, fresh); r != nil {
			t.Fatalf("Claim with %s context left a record: %+v", c.name, r)
		}
	}
	if r := mustGet(t, st, id); r == nil || r.State != store.Running || r.Token != held.Token {
		t.Fatalf("record changed by calls with done contexts: %+v", r)
	}
}

func (s *suite) testPing(t *testing.T) {
	st := s.newStore(t)
	if err := st.Ping(ctx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
