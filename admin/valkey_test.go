package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestWithValkey runs the admin handler against a real valkey-server:
// readiness follows the server (up, hung, dead, back), and a record written
// by the store is inspected and purged through the API.
func TestWithValkey(t *testing.T) {
	srv := valkeytest.Start(t) // fails with install instructions without valkey-server
	ctx := context.Background()
	st, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, ConnTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("valkey.New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	pol := testPolicy(t)
	f := &fixture{reg: prometheus.NewRegistry()}
	f.h = New(Options{Store: st, Policy: func() *policy.Policy { return pol }, Gatherer: f.reg, Token: testToken, V1Lookup: true})

	ready := func() int { return f.do(t, http.MethodGet, "/readyz", nil).Code }
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz with Valkey up = %d, want 200", code)
	}

	id := store.Identity{Owner: "h:alice", Scope: "orders", Key: "order-7"}
	if res, err := st.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "hs1:x", Token: "tok", Lease: 10 * time.Second, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim = %v, %v", res.State, err)
	}
	if ok, err := st.Complete(ctx, id, "tok", store.Response{Status: 201, Header: http.Header{"A": {"b"}}, Body: []byte("created")}); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	target := recordsURL("route", "orders", "owner", "h:alice", "key", "order-7")
	rec := f.do(t, http.MethodGet, target, authed())
	if rec.Code != http.StatusOK {
		t.Fatalf("GET record = %d %s", rec.Code, rec.Body)
	}
	var view map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &view); err != nil {
		t.Fatal(err)
	}
	ms := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for _, k := range []string{"created_at", "stored_at", "retention_end"} {
		if s, _ := view[k].(string); !ms.MatchString(s) {
			t.Errorf("%s = %v, want RFC 3339 with milliseconds", k, view[k])
		}
	}
	if view["state"] != "completed" || view["status"] != float64(201) || view["response_body_bytes"] != float64(7) || view["response_header_bytes"] != float64(len("A: b\r\n")) {
		t.Errorf("record view = %v", view)
	}
	if _, ok := view["lease_end"]; ok {
		t.Errorf("completed record shows a lease_end: %v", view)
	}
	changed, stop := st.Watch(id)
	defer stop()
	if rec := f.do(t, http.MethodDelete, target, authed()); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", rec.Code, rec.Body)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("purge did not wake the record's watcher through Valkey")
	}
	if got, err := st.Get(ctx, id); err != nil || got != nil {
		t.Fatalf("Get after purge = %v, %v; want absent", got, err)
	}

	// A hung server: not ready once the 1 s ping budget runs out.
	srv.Pause()
	start := time.Now()
	rec = f.do(t, http.MethodGet, "/readyz", nil)
	took := time.Since(start)
	srv.Resume()
	assertProblem(t, rec, http.StatusServiceUnavailable, "not-ready")
	if took > ReadyTimeout+2*time.Second {
		t.Errorf("/readyz against a hung server took %v", took)
	}
	// The admin API fails closed too: a store failure is never "not found".
	srv.Kill()
	assertProblem(t, f.do(t, http.MethodGet, target, authed()), http.StatusServiceUnavailable, "store-unavailable")
	assertProblem(t, f.do(t, http.MethodGet, "/readyz", nil), http.StatusServiceUnavailable, "not-ready")
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for ready() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz never recovered after Valkey restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
