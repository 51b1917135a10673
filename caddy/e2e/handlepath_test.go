package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyHandlePathBlocksNeverShareRecords: two handle_path blocks of
// one site, /a/* and /b/*, each with an idempotency of its own on one
// configuration and one Valkey, proxy to two backends. handle_path strips
// its prefix, so both handlers see the path /orders; the client sent
// /a/orders and /b/orders, two endpoints. The same user's key and body
// sent to both never answers /b/orders with /a/orders's record: the
// fingerprint covers the path as sent, so it is 422 key-reused, as for any
// two endpoints, and a retry on /a/orders is still replayed its own.
func TestCaddyHandlePathBlocksNeverShareRecords(t *testing.T) {
	vk := valkeytest.Start(t)
	ups := map[string]*upstream{"a": startUpstream(t), "b": startUpstream(t)}
	var after strings.Builder
	for _, name := range []string{"a", "b"} {
		fmt.Fprintf(&after, "handle_path /%s/* {\n\t\tidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tname %s\n\t\t\tstore_addrs %s\n\t\t}\n\t\treverse_proxy %s {\n\t\t\theader_down X-Backend %s\n\t\t}\n\t}\n\t",
			name, name, vk.Addr(), strings.TrimPrefix(ups[name].URL, "http://"), name)
	}
	c := runCaddy(t, caddySite{YAML: noStoreYAML, Directive: after.String()})
	send := func(name string) answer {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, body, err := gatetest.Post(ctx, nil, c.URL+"/"+name+"/orders", "", http.Header{"Idempotency-Key": {"k-path"}, "X-User": {"alice"}}, `{"amount":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
	}
	first := send("a")
	if first.Status != http.StatusCreated || first.replayed() || first.Header.Get("X-Backend") != "a" {
		t.Fatalf("POST /a/orders: %d replayed=%v X-Backend=%q %s, want backend a's 201\n%s",
			first.Status, first.replayed(), first.Header.Get("X-Backend"), first.Body, c.out.String())
	}
	other := send("b")
	if other.replayed() || other.Header.Get("X-Backend") == "a" {
		t.Fatalf("POST /b/orders was answered /a/orders's stored response: %d X-Backend=%q %s", other.Status, other.Header.Get("X-Backend"), other.Body)
	}
	if other.Status != http.StatusUnprocessableEntity || problemType(other) != "key-reused" {
		t.Fatalf("POST /b/orders with /a/orders's key: %d %s, want 422 key-reused", other.Status, other.Body)
	}
	if retry := send("a"); !retry.replayed() || retry.Header.Get("X-Backend") != "a" {
		t.Fatalf("retry of POST /a/orders: %d replayed=%v X-Backend=%q, want backend a's record", retry.Status, retry.replayed(), retry.Header.Get("X-Backend"))
	}
	if n := ups["a"].execs.Load(); n != 1 {
		t.Errorf("backend a executed %d times, want 1", n)
	}
	if n := ups["b"].execs.Load(); n != 0 {
		t.Errorf("backend b executed %d times for a reused key, want 0", n)
	}
}
