package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/postgres/pgtest"
)

// recoverWithin bounds how long a fault test retries an operation after
// the server is back.
const recoverWithin = 20 * time.Second

// opCtx bounds one operation of a fault test.
func opCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestFaultServerStoppedAndBack: with the server stopped every operation
// fails with ErrUnavailable (never an answer) within its deadline; once it
// is back the same store works again without a restart, and the listening
// connection's loss and return were reported as disruptions.
func TestFaultServerStoppedAndBack(t *testing.T) {
	srv := pgtest.Start(t)
	var disruptions atomic.Int64
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable(), OnDisruption: func() { disruptions.Add(1) }})
	ctx := testCtx(t)
	held := store.Identity{Owner: "o", Scope: "default", Key: "held"}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: held, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	watch, stop := s.Watch(held)
	defer stop()
	srv.Stop()
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher not woken when the listening connection was lost")
	}
	fresh := store.Identity{Owner: "o", Scope: "default", Key: "fresh"}
	ops := map[string]func(context.Context) error{
		"Claim": func(c context.Context) error {
			res, err := s.Claim(c, store.ClaimParams{Identity: fresh, Fingerprint: "fp", Token: "t2", Lease: time.Minute, Retention: time.Hour})
			if err == nil || res.State == store.Claimed {
				return fmt.Errorf("answered %+v", res)
			}
			return err
		},
		"Complete": func(c context.Context) error {
			ok, err := s.Complete(c, held, "t", store.Response{Status: 200})
			if ok {
				return errors.New("answered true")
			}
			return err
		},
		"Release": func(c context.Context) error { _, err := s.Release(c, held, "t"); return err },
		"Extend":  func(c context.Context) error { _, err := s.Extend(c, held, "t", time.Minute); return err },
		"Get":     func(c context.Context) error { _, err := s.Get(c, held); return err },
		"Delete":  func(c context.Context) error { _, err := s.Delete(c, held); return err },
		"Ping":    func(c context.Context) error { return s.Ping(c) },
	}
	for name, op := range ops {
		c, cancel := opCtx(3 * time.Second)
		start := time.Now()
		err := op(c)
		cancel()
		if err == nil || !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with the server stopped: %v; want an error wrapping ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("%s took %v, beyond its 3s deadline", name, d)
		}
	}
	if disruptions.Load() < 1 {
		t.Error("OnDisruption not called when the listening connection was lost")
	}
	srv.Start()
	gatetest.EventuallyNil(t, recoverWithin, "Ping after the restart", func() error {
		c, cancel := opCtx(2 * time.Second)
		defer cancel()
		return s.Ping(c)
	})
	gatetest.EventuallyNil(t, recoverWithin, "Complete after the restart", func() error {
		c, cancel := opCtx(2 * time.Second)
		defer cancel()
		ok, err := s.Complete(c, held, "t", store.Response{Status: 201, Body: []byte("done")})
		if err == nil && !ok {
			return errors.New("Complete answered false")
		}
		return err
	})
	if disruptions.Load() < 2 {
		// Loss and re-establishment are both reported; give the listener
		// its backoff.
		gatetest.EventuallyNil(t, recoverWithin, "re-established listen reported", func() error {
			if disruptions.Load() < 2 {
				return fmt.Errorf("%d disruptions", disruptions.Load())
			}
			return nil
		})
	}
	// Notifications flow again through the new listening connection.
	peer := open(t, Options{DSN: srv.DSN(), Table: s.TableName()})
	if res, err := peer.Claim(ctx, store.ClaimParams{Identity: fresh, Fingerprint: "fp", Token: "t3", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("peer Claim = %+v, %v", res, err)
	}
	gatetest.EventuallyNil(t, recoverWithin, "wake-up from the peer after the restart", func() error {
		ch, stop := s.Watch(fresh)
		defer stop()
		select {
		case <-ch: // a spurious wake from a re-LISTEN; try again
			return errors.New("spurious wake")
		default:
		}
		if ok, err := peer.Extend(ctx, fresh, "t3", time.Minute); !ok || err != nil {
			return fmt.Errorf("Extend = %v, %v", ok, err)
		}
		if _, err := peer.Release(ctx, fresh, "t3"); err != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-time.After(3 * time.Second):
			return errors.New("not woken by the peer's Release")
		}
	})
}

// TestFaultKillKeepsCompletedRecords: with fsync on, a kill -9 of every
// PostgreSQL process and a restart lose no completed record and no claim,
// and the same stores carry on.
func TestFaultKillKeepsCompletedRecords(t *testing.T) {
	srv := pgtest.Start(t, pgtest.WithFsync())
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable()})
	ctx := testCtx(t)
	const n = 30
	id := func(i int) store.Identity {
		return store.Identity{Owner: "o", Scope: "default", Key: fmt.Sprintf("k%d", i)}
	}
	body := func(i int) []byte { return []byte(fmt.Sprintf("response %d \x00\xff", i)) }
	for i := range n {
		tok := fmt.Sprintf("t%d", i)
		if res, err := s.Claim(ctx, store.ClaimParams{Identity: id(i), Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
			t.Fatalf("Claim %d = %+v, %v", i, res, err)
		}
		if i%2 == 0 { // odd ones stay running
			if ok, err := s.Complete(ctx, id(i), tok, store.Response{Status: 201, Body: body(i)}); !ok || err != nil {
				t.Fatalf("Complete %d = %v, %v", i, ok, err)
			}
		}
	}
	srv.Kill()
	srv.Start()
	if !strings.Contains(srv.LogTail(), "not properly shut down") {
		t.Fatalf("the restart ran no crash recovery; server log:\n%s", srv.LogTail())
	}
	lost := 0
	for i := range n {
		var res store.ClaimResult
		gatetest.EventuallyNil(t, recoverWithin, "Claim after the crash", func() error {
			c, cancel := opCtx(2 * time.Second)
			defer cancel()
			var err error
			res, err = s.Claim(c, store.ClaimParams{Identity: id(i), Fingerprint: "fp", Token: "retry", Lease: time.Minute, Retention: time.Hour})
			return err
		})
		switch {
		case i%2 == 0 && (res.State != store.Completed || !bytes.Equal(res.Response.Body, body(i))):
			lost++
			t.Errorf("completed record %d after kill -9 = %+v", i, res)
		case i%2 == 1 && res.State != store.Running:
			lost++
			t.Errorf("running claim %d after kill -9 = %+v", i, res)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d records lost by kill -9 with fsync on", lost, n)
	}
}

// TestFaultListenTerminated: pg_terminate_backend on the listening
// connection wakes the watchers at once (they re-check, as after the
// safety poll), is reported as a disruption, and the subscription is back
// for the next notification.
func TestFaultListenTerminated(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase()
	var disruptions atomic.Int64
	s := open(t, Options{DSN: srv.DatabaseDSN(db), Table: freshTable(), OnDisruption: func() { disruptions.Add(1) }})
	peer := open(t, Options{DSN: srv.DatabaseDSN(db), Table: s.TableName()})
	ctx := testCtx(t)
	id := store.Identity{Owner: "o", Scope: "default", Key: "k"}
	if res, err := peer.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	ch, stop := s.Watch(id)
	defer stop()
	if n := srv.Terminate(db, ListenApplicationName); n != 2 {
		t.Fatalf("terminated %d listening connections, want 2 (one per store)", n)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken when its listening connection was terminated")
	}
	gatetest.EventuallyNil(t, recoverWithin, "loss and re-establishment reported", func() error {
		if d := disruptions.Load(); d < 2 {
			return fmt.Errorf("%d disruptions, want 2", d)
		}
		return nil
	})
	gatetest.EventuallyNil(t, recoverWithin, "listening again", func() error {
		n, err := srv.QueryInt("postgres", `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, db, ListenApplicationName)
		if err == nil && n != 2 {
			err = fmt.Errorf("%d listening connections, want 2", n)
		}
		return err
	})
	ch, stop2 := s.Watch(id)
	defer stop2()
	if ok, err := peer.Complete(ctx, id, "t", store.Response{Status: 200}); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken by the peer's Complete after the listening connection came back")
	}
}

// TestFaultStalledServerHonoursDeadline: a server that answers nothing
// (SIGSTOP) makes each operation fail at its context deadline with an
// error wrapping ErrUnavailable and context.DeadlineExceeded.
func TestFaultStalledServerHonoursDeadline(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, Options{DSN: srv.DSN(), Table: freshTable()})
	id := store.Identity{Owner: "o", Scope: "default", Key: "k"}
	srv.Pause()
	defer srv.Resume()
	c, cancel := opCtx(300 * time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := s.Claim(c, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
	if err == nil || res.State == store.Claimed || !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim on a stalled server = %+v, %v; want ErrUnavailable and DeadlineExceeded", res, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Claim returned after %v, want about its 300ms deadline", d)
	}
	srv.Resume()
	gatetest.EventuallyNil(t, recoverWithin, "Claim after resume", func() error {
		c, cancel := opCtx(2 * time.Second)
		defer cancel()
		res, err := s.Claim(c, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
		if err == nil && res.State != store.Claimed {
			return fmt.Errorf("Claim = %+v", res)
		}
		return err
	})
}
