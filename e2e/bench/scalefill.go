package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	storevalkey "github.com/idemgate/idemgate/store/valkey"
)

// scaleTemplateFrom sends one keyed request of the bench through idemgate at
// base and reads the completed record it left, so that the filled records
// are the bench's real completed record in the current layout, whatever
// idemgate's proxy and store make of it.
func scaleTemplateFrom(ctx context.Context, c vk.Client, base, run string) (*scaleTemplate, error) {
	id := store.Identity{Owner: "h:user-0", Scope: "default", Key: scaleKey(run, "tpl", 0)}
	client := newClient(1)
	defer client.CloseIdleConnections()
	code, _, err := post(ctx, client, base+"/v1/orders", "user-0", id.Key)
	if err == nil && code != http.StatusCreated {
		err = fmt.Errorf("answered %d", code)
	}
	if err != nil {
		return nil, fmt.Errorf("template request: %w", err)
	}
	key := storevalkey.Key(storevalkey.DefaultKeyPrefix, id)
	f, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("HGETALL %s: %w", key, err)
	}
	if f["s"] != "completed" || f["v"] != "3" {
		return nil, fmt.Errorf("template record %s is not a completed layout 3 record: s=%q v=%q (fields %d)", key, f["s"], f["v"], len(f))
	}
	pn, err := strconv.Atoi(f["pn"])
	if err != nil || pn < 1 {
		return nil, fmt.Errorf("template record %s: pn %q", key, f["pn"])
	}
	var rec strings.Builder
	for i := range pn {
		rec.WriteString(f["p"+strconv.Itoa(i)])
	}
	r := rec.String()
	parts, _, err := netstrings(r, 5)
	if err != nil {
		return nil, fmt.Errorf("template record %s: %w", key, err)
	}
	if parts[0] != id.Owner || parts[1] != id.Scope || parts[2] != id.Key {
		return nil, fmt.Errorf("template record %s holds identity %q %q %q, want %q %q %q", key, parts[0], parts[1], parts[2], id.Owner, id.Scope, id.Key)
	}
	_, afterID, _ := netstrings(r, 3)
	return &scaleTemplate{
		id: id, fingerprint: parts[3], recipe: parts[4],
		expiry: f["x"], token: f["ct"], rest: afterID, recordLen: len(r),
	}, nil
}

// upstreamBody is the body e2e/bench/upstream answers every create with; a
// replay of a filled record must answer it.
var upstreamBody = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR",` +
	`"customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],` +
	`"created_at":"2025-01-01T00:00:00Z","pad":"xxxxxxxxxxxx"}` + "\n")

// netstrings reads n netstrings ("len:bytes") from the start of s and
// returns them and what follows.
func netstrings(s string, n int) ([]string, string, error) {
	out := make([]string, 0, n)
	for range n {
		i := strings.IndexByte(s, ':')
		if i < 1 {
			return nil, "", errors.New("malformed netstring")
		}
		l, err := strconv.Atoi(s[:i])
		if err != nil || l < 0 || i+1+l > len(s) {
			return nil, "", fmt.Errorf("malformed netstring length %q", s[:i])
		}
		out = append(out, s[i+1:i+1+l])
		s = s[i+1+l:]
	}
	return out, s, nil
}

func ns(s string) string { return strconv.Itoa(len(s)) + ":" + s }

// scaleKey is the idempotency key of the i-th record of kind in this run;
// a fixed width, so every filled record has the template's size.
func scaleKey(run, kind string, i int) string {
	return fmt.Sprintf("scale-%s-%s-%010d", run, kind, i)
}

func fillIdentity(run string, i int) store.Identity {
	return store.Identity{Owner: "h:user-" + strconv.Itoa(i%owners), Scope: "default", Key: scaleKey(run, "rec", i)}
}

// scaleFillWorkers is how many goroutines write filled records, each with
// a pipeline of scaleFillBatch records in flight.
const (
	scaleFillWorkers = 8
	scaleFillBatch   = 256
)

// fillRecords writes the records from..to-1 of run: the template's record
// under another identity, byte for byte what complete.lua writes (the
// hash s, x, ct, v, pn, p0..p(pn-1) with 64-byte p fields, and PEXPIREAT
// x), in pipelines of HSET and PEXPIREAT. Cloning instead of claiming and
// completing each record takes a million records from minutes (two scripts
// and their round trips each) to seconds.
func fillRecords(ctx context.Context, c vk.Client, tpl *scaleTemplate, run string, from, to int) error {
	return forBatches(ctx, from, to, func(lo, hi int) error {
		cmds := make(vk.Commands, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			id := fillIdentity(run, i)
			key := storevalkey.Key(storevalkey.DefaultKeyPrefix, id)
			r := ns(id.Owner) + ns(id.Scope) + ns(id.Key) + tpl.rest
			// As complete.lua: 64-byte fields, one field past 3,072 bytes.
			size := 64
			if len(r) > 3072 {
				size = len(r)
			}
			pn := (len(r) + size - 1) / size
			args := make([]string, 0, 10+2*pn)
			args = append(args, "s", "completed", "x", tpl.expiry, "ct", tpl.token, "v", "3", "pn", strconv.Itoa(pn))
			for p := range pn {
				args = append(args, "p"+strconv.Itoa(p), r[p*size:min(len(r), (p+1)*size)])
			}
			cmds = append(cmds,
				c.B().Arbitrary("HSET").Keys(key).Args(args...).Build(),
				c.B().Pexpireat().Key(key).MillisecondsTimestamp(mustInt(tpl.expiry)).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
		}
		return nil
	})
}

// deleteRecords removes the records 0..n-1 of run (UNLINK, pipelined).
func deleteRecords(ctx context.Context, c vk.Client, tpl *scaleTemplate, run string, n int) error {
	return forBatches(ctx, 0, n, func(lo, hi int) error {
		cmds := make(vk.Commands, 0, hi-lo)
		for i := lo; i < hi; i++ {
			cmds = append(cmds, c.B().Unlink().Key(storevalkey.Key(storevalkey.DefaultKeyPrefix, fillIdentity(run, i))).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
		}
		return nil
	})
}

// forBatches calls f on [lo, hi) batches of scaleFillBatch covering
// [from, to) from scaleFillWorkers goroutines; the first error ends it.
func forBatches(ctx context.Context, from, to int, f func(lo, hi int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make([]error, scaleFillWorkers)
	for w := range scaleFillWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lo := int(next.Add(scaleFillBatch)) - scaleFillBatch
				if lo >= to {
					return
				}
				if err := f(lo, min(to, lo+scaleFillBatch)); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
