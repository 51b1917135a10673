package valkey_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// clusterPublish is the cluster bus message type that carries a PUBLISH
// to the other nodes (CLUSTERMSG_TYPE_PUBLISH in valkey's cluster_legacy.h).
const clusterPublish = "4"

// TestWatchClusterBusLoss: in Cluster mode a watcher is woken by a peer's
// Complete, Release and Delete on a record of either layout, on every
// primary, even when the cluster bus loses every PUBLISH it carries
// between nodes (as it does while a link is down: a fresh cluster, a link
// reset under load). Each node drops the PUBLISH messages the bus brings
// it (DEBUG DROP-CLUSTER-PACKET-FILTER), so a wake-up arrives only from
// the primary that ran the script.
func TestWatchClusterBusLoss(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	dropBusPublish(t, c.Servers)
	for _, layouts := range [][2]int{{valkey.Layout3, valkey.Layout4}, {valkey.Layout4, valkey.Layout3}} {
		prefix := randomPrefix()
		st := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix, Layout: layouts[0]})
		peer := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix, Layout: layouts[1]})
		for _, op := range []string{"complete", "release", "delete"} {
			// One record on each primary at least.
			onNode := make(map[*valkeytest.Server]bool)
			for i := 0; len(onNode) < len(c.Servers); i++ {
				if i == 64 {
					t.Fatalf("64 keys cover %d of %d primaries", len(onNode), len(c.Servers))
				}
				what := fmt.Sprintf("watcher (layout %d) of a record of layout %d, %s by a peer, key %d", layouts[0], layouts[1], op, i)
				id := store.Identity{Owner: "o", Scope: "r", Key: fmt.Sprintf("%s-%d", op, i)}
				ch, stop := st.Watch(id)
				p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour}
				if r, err := peer.Claim(t.Context(), p); err != nil || r.State != store.Claimed {
					t.Fatalf("%s: Claim = %+v, %v", what, r, err)
				}
				for _, n := range c.Servers {
					if out, _ := n.CLI("EXISTS", st.Key(id)); out == "1" {
						onNode[n] = true
					}
				}
				var ok bool
				var err error
				switch op {
				case "complete":
					ok, err = peer.Complete(t.Context(), id, p.Token, store.Response{Status: 201})
				case "release":
					ok, err = peer.Release(t.Context(), id, p.Token)
				case "delete":
					ok, err = peer.Delete(t.Context(), id)
				}
				if err != nil || !ok {
					t.Fatalf("%s: %v, %v", what, ok, err)
				}
				select {
				case <-ch:
				case <-time.After(3 * time.Second):
					t.Fatalf("%s: watcher not woken within 3s", what)
				}
				stop()
			}
		}
	}
}

// dropBusPublish makes every node drop the PUBLISH messages the cluster
// bus brings it.
func dropBusPublish(t *testing.T, nodes []*valkeytest.Server) {
	t.Helper()
	for _, n := range nodes {
		if out, err := n.CLI("DEBUG", "DROP-CLUSTER-PACKET-FILTER", clusterPublish); err != nil || out != "OK" {
			t.Fatalf("DEBUG DROP-CLUSTER-PACKET-FILTER on %s: %q %v", n.Addr(), out, err)
		}
	}
}

// TestWatchClusterNewPrimary: a replica promoted after the store started
// gets the store's subscription too (within a topology refresh), so the
// wake-ups of the records it now holds keep coming from the node that runs
// their scripts, with every bus PUBLISH dropped as in
// TestWatchClusterBusLoss.
func TestWatchClusterNewPrimary(t *testing.T) {
	c := valkeytest.StartClusterWithReplicas(t, 3)
	dropBusPublish(t, append(append([]*valkeytest.Server(nil), c.Servers...), c.Replicas...))
	prefix := randomPrefix()
	st := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix})
	peer := newStore(t, valkey.Options{Addrs: c.Addrs(), KeyPrefix: prefix})
	promoted := c.Replicas[0]
	if out, err := promoted.CLI("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil || out != "OK" {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on replica 0: %q, %v", out, err)
	}
	// Both stores subscribe on the new primary.
	deadline := time.Now().Add(15 * time.Second)
	for {
		role, _ := promoted.CLI("ROLE")
		subs, _ := promoted.CLI("PUBSUB", "NUMSUB", st.Channel())
		if strings.HasPrefix(role, "master") && strings.HasSuffix(subs, "\n2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 0 after CLUSTER FAILOVER TAKEOVER: ROLE %q, PUBSUB NUMSUB %q; want a primary with both stores subscribed", role, subs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatal("64 keys, none on the promoted replica")
		}
		id := store.Identity{Owner: "o", Scope: "r", Key: fmt.Sprintf("k-%d", i)}
		ch, stop := st.Watch(id)
		defer stop()
		p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour}
		if r, err := peer.Claim(t.Context(), p); err != nil || r.State != store.Claimed {
			t.Fatalf("Claim %d = %+v, %v", i, r, err)
		}
		if out, _ := promoted.CLI("EXISTS", st.Key(id)); out != "1" {
			continue
		}
		if ok, err := peer.Delete(t.Context(), id); err != nil || !ok {
			t.Fatalf("Delete %d: %v, %v", i, ok, err)
		}
		select {
		case <-ch:
		case <-time.After(3 * time.Second):
			t.Fatalf("delete of a record on the promoted replica: watcher not woken within 3s")
		}
		return
	}
}
