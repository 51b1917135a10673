package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// sentinelSet is a primary, two replicas that replicate it through a relay
// (so replication can be cut while the sentinel still reaches everyone
// directly) and one sentinel, all on loopback.
type sentinelSet struct {
	primary  *valkeytest.Server
	relay    *relay
	replicas []*valkeytest.Server
	sentinel *valkeytest.Sentinel
}

func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	s := &sentinelSet{primary: valkeytest.Start(t)}
	s.relay = startRelay(t, s.primary.Addr())
	for range 2 {
		s.replicas = append(s.replicas, valkeytest.StartReplica(t, s.relay.Addr()))
	}
	s.sentinel = valkeytest.StartSentinel(t, s.primary, "idemgate-failover")
	return s
}

// inSync waits until both replicas hold as many keys as the primary.
func (s *sentinelSet) inSync(t *testing.T) {
	t.Helper()
	eventually(t, 10*time.Second, "replicas in sync with the primary", func() bool {
		want, err := s.primary.CLI("DBSIZE")
		if err != nil {
			return false
		}
		for _, r := range s.replicas {
			if got, err := r.CLI("DBSIZE"); err != nil || got != want {
				return false
			}
		}
		return true
	})
}

// sentinelStore is an edit for startGateWith that points the valkey store
// at the sentinel and sets acks.
func sentinelStore(s *sentinelSet, acks string) func(string) string {
	return func(doc string) string {
		old := fmt.Sprintf("    addrs: [%q]\n", "SENTINEL")
		repl := fmt.Sprintf("    addrs: [%q]\n    sentinel_master: %q\n", s.sentinel.Addr(), s.sentinel.MasterName)
		if acks != "" {
			repl += "    acks: " + acks + "\n"
		}
		return strings.Replace(doc, old, repl, 1)
	}
}

// TestFaultSentinelFailover: replication to both replicas is cut, keyed
// requests arrive, the primary is SIGKILLed and the sentinel promotes a
// replica that never saw them; every operation is then retried until
// answered. With acks.replicas 1 no operation runs twice and every one is
// finally answered 201; with acks off the operations completed on the lost
// primary run again (the test would catch acks that do nothing).
func TestFaultSentinelFailover(t *testing.T) {
	for _, tc := range []struct {
		name, acks string
		wantDups   bool
	}{
		{"acks", "{replicas: 1, timeout: 300ms}", false},
		{"no-acks", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := startSentinelSet(t)
			up := startUpstream(t)
			g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{"SENTINEL"}},
				sentinelStore(set, tc.acks))
			const before, during = 5, 10
			keys := make([]string, 0, before+during)
			for i := range before {
				k := fmt.Sprintf("before-%d", i)
				keys = append(keys, k)
				if a := mustPost(t, g.URL+"/v1/orders", "alice", k, "{}"); a.Status != 201 {
					t.Fatalf("before the cut, %s: %v", k, a)
				}
			}
			set.inSync(t)

			set.relay.Set(relayBlackhole, 0)
			answers := make([]Answer, during)
			var wg sync.WaitGroup
			for i := range during {
				k := fmt.Sprintf("during-%d", i)
				keys = append(keys, k)
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i] = postTimeout(10*time.Second, g.URL+"/v1/orders", "alice", k, "{}")
				}()
			}
			wg.Wait()
			for i, a := range answers {
				switch {
				case tc.wantDups && a.Status != 201:
					t.Fatalf("acks off, request %d during the cut: %v, want 201 (the primary answers)", i, a)
				case !tc.wantDups && !a.isProblem(503, "store-unavailable"):
					t.Fatalf("acks on, request %d during the cut: %v, want 503 store-unavailable (not acknowledged)", i, a)
				}
			}
			executedDuringCut := up.Total() - before

			set.primary.Kill()
			failoverStart := time.Now()
			eventually(t, 30*time.Second, "the sentinel to promote a replica", func() bool {
				out, err := set.sentinel.CLI("SENTINEL", "get-master-addr-by-name", set.sentinel.MasterName)
				return err == nil && !strings.Contains(out, fmt.Sprint(set.primary.Port()))
			})
			t.Logf("promoted after %v", time.Since(failoverStart))

			pending := append([]string(nil), keys...)
			deadline := time.Now().Add(40 * time.Second)
			for len(pending) > 0 {
				var next []string
				for _, k := range pending {
					if a := postTimeout(5*time.Second, g.URL+"/v1/orders", "alice", k, "{}"); a.Status != 201 {
						next = append(next, k)
					}
				}
				pending = next
				if len(pending) > 0 {
					if time.Now().After(deadline) {
						t.Fatalf("%d operations still unanswered 40s after the failover: %v", len(pending), pending)
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			dups := 0
			for _, k := range keys {
				switch n := up.Calls("alice", k); {
				case n > 1:
					dups++
				case n == 0:
					t.Fatalf("operation %s answered 201 but never executed", k)
				}
			}
			t.Logf("acks %q: executed during the cut %d, executed twice %d of %d", tc.acks, executedDuringCut, dups, len(keys))
			if tc.wantDups && dups == 0 {
				t.Fatalf("acks off: no operation ran twice; the test no longer shows the failover window")
			}
			if !tc.wantDups && dups != 0 {
				t.Fatalf("acks on: %d operations ran twice across the failover", dups)
			}
		})
	}
}
