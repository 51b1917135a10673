package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyLayout5BesideLayout4: two Caddy instances on one Valkey in the
// middle of the rollout to layout 5 (docs/protocol.md, "Rolling upgrade to
// layout 5"), serving one site (api.example, as behind one load
// balancer, so that both have its key scope): one writes layout 5 (`set store.valkey.layout 5`), the other
// still writes 4. A request held in the upstream on the layout 5 Caddy
// leaves a layout 5 running record; its duplicate on the layout 4 Caddy
// waits and marks that record, so the completion publishes and the waiter
// is answered with the replay. Keys written by either Caddy are replayed by
// the other, and the upstream runs once per key.
func TestCaddyLayout5BesideLayout4(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	up.hold = make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(up.hold) }) }
	t.Cleanup(release) // a failed test must not leave the upstream's handler held
	site := func(layout int) caddySite {
		return caddySite{
			Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-l5:\n\t\tset store.valkey.layout %d", vk.Addr(), layout),
			Hosts:       map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
		}
	}
	five, four := runCaddy(t, site(5)), runCaddy(t, site(4))

	type result struct {
		a   answer
		err error
	}
	first, dup := make(chan result, 1), make(chan result, 1)
	go func() {
		a, err := tryPostHost(five.URL, "api.example", "alice", "held", `{"amount":1}`)
		first <- result{a, err}
	}()
	// The held request's record: the one key besides the scope's owner
	// record (policy.OwnerRecord), whose value names its owner once
	// completed and its fingerprint ("owner-source:…") while running.
	record := func() string {
		keys, err := vk.CLI("KEYS", "caddy-l5:{*")
		if err != nil {
			return ""
		}
		for _, k := range strings.Fields(keys) {
			v, _ := vk.CLI("GET", k)
			if !strings.Contains(v, policy.OwnerRecordOwner) && !strings.Contains(v, "owner-source:") {
				return v
			}
		}
		return ""
	}
	gatetest.Eventually(t, 10*time.Second, "a layout 5 running record (\"5r…\") for the held request", func() bool {
		return strings.HasPrefix(record(), "5r")
	})
	go func() {
		a, err := tryPostHost(four.URL, "api.example", "alice", "held", `{"amount":1}`)
		dup <- result{a, err}
	}()
	if !gatetest.Until(10*time.Second, func() bool {
		v := record()
		return strings.HasPrefix(v, "5r") && strings.HasSuffix(v, " 1")
	}) {
		v := record()
		release()
		r := <-dup
		t.Fatalf("the layout 4 Caddy's waiter did not mark the running record within 10s: record %q; the duplicate then got %d %s (err %v)\n%s", v, r.a.Status, r.a.Body, r.err, four.out.String())
	}
	release()
	r1, r2 := <-first, <-dup
	if r1.err != nil || r2.err != nil {
		t.Fatalf("first: %v; duplicate: %v", r1.err, r2.err)
	}
	if r1.a.Status != http.StatusCreated {
		t.Fatalf("first on the layout 5 Caddy: %d %s", r1.a.Status, r1.a.Body)
	}
	sameResponse(t, r1.a, r2.a)

	// Keys written by one are replayed by the other, both ways.
	for _, c := range []struct {
		name         string
		write, other *caddyProc
	}{{"5 then 4", five, four}, {"4 then 5", four, five}} {
		key := "k-" + strings.ReplaceAll(c.name, " ", "-")
		a := postHost(t, c.write.URL, "api.example", "bob", key, `{"amount":2}`)
		if a.Status != http.StatusCreated {
			t.Fatalf("%s: first %d %s", c.name, a.Status, a.Body)
		}
		sameResponse(t, a, postHost(t, c.other.URL, "api.example", "bob", key, `{"amount":2}`))
	}
	if n := up.execs.Load(); n != 3 {
		t.Fatalf("upstream executed %d times for 3 keys across the two layouts, want 3", n)
	}
}
