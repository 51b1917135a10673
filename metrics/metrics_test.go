package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

func TestMetricsLintAndValues(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	m.Request("orders", metrics.OutcomeForwarded)
	m.Request("orders", metrics.OutcomeReplayed)
	m.Request("orders", metrics.OutcomeReplayed)
	m.Upstream("orders", 30*time.Millisecond)
	m.ClaimsInFlight(1)
	m.Waiters(1)
	m.Waiters(1)
	m.Waiters(-1)
	m.Takeover("orders")
	m.HeartbeatFailure("orders")
	m.StoredResponse("orders", 200)

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP idemgate_requests_total Requests handled, by route and outcome.
# TYPE idemgate_requests_total counter
idemgate_requests_total{outcome="forwarded",route="orders"} 1
idemgate_requests_total{outcome="replayed",route="orders"} 2
# HELP idemgate_waiters Requests waiting for a running record of the same identity.
# TYPE idemgate_waiters gauge
idemgate_waiters 1
# HELP idemgate_claims_in_flight Claims this instance holds while their upstream call runs.
# TYPE idemgate_claims_in_flight gauge
idemgate_claims_in_flight 1
# HELP idemgate_lease_takeovers_total Claims that took over a running record whose lease had ended.
# TYPE idemgate_lease_takeovers_total counter
idemgate_lease_takeovers_total{route="orders"} 1
# HELP idemgate_heartbeat_failures_total Lease extensions that failed or found the claim lost.
# TYPE idemgate_heartbeat_failures_total counter
idemgate_heartbeat_failures_total{route="orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"idemgate_requests_total", "idemgate_waiters", "idemgate_claims_in_flight",
		"idemgate_lease_takeovers_total", "idemgate_heartbeat_failures_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "idemgate_upstream_duration_seconds", "idemgate_stored_response_size_bytes", "idemgate_build_info"); n != 3 {
		t.Fatalf("histograms and build info: %d series, want 3", n)
	}
	// A second registration on the same registry is an error, not a panic.
	if _, err := metrics.New(reg, "again"); err == nil {
		t.Fatal("registering twice must fail")
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	m.Request("r", metrics.OutcomeForwarded)
	m.Upstream("r", time.Second)
	m.Waiters(1)
	m.StoreAck("claim", time.Millisecond, false)
	m.StoreUp(true)
	if s := metrics.InstrumentStore(memory.New(), nil); s == nil {
		t.Fatal("InstrumentStore(nil metrics) must return the store")
	}
}

type brokenStore struct{ store.Store }

func (brokenStore) Ping(context.Context) error { return errors.New("down") }

func TestInstrumentedStoreTimesOperations(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := metrics.New(reg, "dev")
	mem := memory.New()
	defer mem.Close()
	s := metrics.InstrumentStore(brokenStore{mem}, m)
	ctx := context.Background()
	id := store.Identity{Owner: "o", Scope: "r", Key: "k"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "f", Token: "t", Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Complete(ctx, id, "t", store.Response{Status: 201}); !ok || err != nil {
		t.Fatalf("complete: %v %v", ok, err)
	}
	_ = s.Ping(ctx)
	for _, c := range []struct{ op, result string }{{"claim", "ok"}, {"complete", "ok"}, {"ping", "error"}} {
		h, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range h {
			if mf.GetName() != "idemgate_store_operation_duration_seconds" {
				continue
			}
			for _, metric := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range metric.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["operation"] == c.op && labels["result"] == c.result && metric.GetHistogram().GetSampleCount() == 1 {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no observation for operation=%s result=%s", c.op, c.result)
		}
	}
}

func TestStoreAckAndStoreUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	m.StoreAck("claim", 2*time.Millisecond, true)
	m.StoreAck("claim", 500*time.Millisecond, false)
	m.StoreAck("complete", 500*time.Millisecond, false)
	m.StoreUp(true)
	want := `
# HELP idemgate_store_up 1 while the store is connected and answers, 0 while it is not (yet).
# TYPE idemgate_store_up gauge
idemgate_store_up 1
# HELP idemgate_store_writes_not_acknowledged_total Store writes that the required replicas did not acknowledge in time, by operation.
# TYPE idemgate_store_writes_not_acknowledged_total counter
idemgate_store_writes_not_acknowledged_total{operation="claim"} 1
idemgate_store_writes_not_acknowledged_total{operation="complete"} 1
idemgate_store_writes_not_acknowledged_total{operation="extend"} 0
`
	// extend was never unacknowledged: its series exists from the start.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemgate_store_up", "idemgate_store_writes_not_acknowledged_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "idemgate_store_ack_duration_seconds"); n != 2 {
		t.Fatalf("ack duration series = %d, want 2 (claim, complete)", n)
	}
	m.StoreUp(false)
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP idemgate_store_up 1 while the store is connected and answers, 0 while it is not (yet).\n# TYPE idemgate_store_up gauge\nidemgate_store_up 0\n"), "idemgate_store_up"); err != nil {
		t.Fatal(err)
	}
}

// TestRequestDuration: every request is observed by route, method and
// status class; a method outside the known set is OTHER, so a client
// cannot mint series, and a status outside 100..599 counts as 2xx.
func TestRequestDuration(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg, "v1")
	if err != nil {
		t.Fatal(err)
	}
	m.RequestDuration("orders", "POST", 201, 3*time.Millisecond)
	m.RequestDuration("orders", "POST", 201, 20*time.Millisecond)
	m.RequestDuration("orders", "POST", 409, time.Millisecond)
	m.RequestDuration("orders", "BREW", 503, time.Millisecond)
	m.RequestDuration("orders", "post", 101, time.Millisecond) // methods are case-sensitive (RFC 9110 section 9.1)
	m.RequestDuration("default", "GET", 0, time.Millisecond)
	var nilM *metrics.Metrics
	nilM.RequestDuration("orders", "GET", 200, time.Second) // a nil *Metrics records nothing
	want := map[string]uint64{
		`orders/POST/2xx`: 2, `orders/POST/4xx`: 1, `orders/OTHER/5xx`: 1, `orders/OTHER/1xx`: 1, `default/GET/2xx`: 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "idemgate_request_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["route"]+"/"+l["method"]+"/"+l["code_class"]] = s.GetHistogram().GetSampleCount()
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d observations, want %d", k, got[k], n)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// BenchmarkRequestDuration is the cost of the request duration histogram
// per request once a route's cell is resolved: no allocation.
func BenchmarkRequestDuration(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RequestDuration("orders", "POST", 201, time.Millisecond)
		}
	})
}

// TestRequestDurationAllocs: observing a request allocates nothing once its
// route, method and class were seen (the proxy's allocation ceilings count
// on it).
func TestRequestDurationAllocs(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	m.RequestDuration("orders", "POST", 201, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { m.RequestDuration("orders", "POST", 201, time.Millisecond) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}

// BenchmarkPerRequestMetrics is what a fresh key records besides its
// duration: its outcome, its upstream time, its stored size, and the
// claim and the completion timed by the instrumented store.
func BenchmarkPerRequestMetrics(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	st := metrics.InstrumentStore(memory.New(), m)
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request("orders", metrics.OutcomeForwarded)
			m.Upstream("orders", time.Millisecond)
			m.StoredResponse("orders", 227)
			_ = st.Ping(ctx)
			_ = st.Ping(ctx)
		}
	})
}
