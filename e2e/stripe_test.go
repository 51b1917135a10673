package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// countingTransport counts the requests a client library sends to
// idemgate, its own retries included.
type countingTransport struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// stripeUpstream answers POST /v1/customers as Stripe's API does: the
// created customer, numbered by execution.
func stripeUpstream(t *testing.T, delay time.Duration, entered chan struct{}) *Upstream {
	up := startUpstream(t)
	var n atomic.Int64
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", fmt.Sprintf("req_%d", n.Add(1)))
		fmt.Fprintf(w, `{"id":"cus_%d","object":"customer","email":%q}`, n.Load(), r.PostForm.Get("email"))
	}, delay, entered)
	return up
}

// stripeClient is stripe-go pointed at idemgate, retrying as the issue's
// trial configured it (4 network retries: 5 sends at most), its sends
// counted.
func stripeClient(g *Gate) (*stripe.Client, *countingTransport) {
	ct := &countingTransport{next: http.DefaultTransport}
	cfg := &stripe.BackendConfig{
		URL:               stripe.String(g.URL),
		MaxNetworkRetries: stripe.Int64(4),
		HTTPClient:        &http.Client{Transport: ct, Timeout: 20 * time.Second},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	return stripe.NewClient("sk_test_platform", stripe.WithBackends(stripe.NewBackendsWithConfig(cfg))), ct
}

func createCustomer(sc *stripe.Client, email, key string) (*stripe.Customer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &stripe.CustomerCreateParams{Email: stripe.String(email)}
	p.SetIdempotencyKey(key)
	return sc.V1Customers.Create(ctx, p)
}

// stripeGate starts idemgate in front of up with the Stripe-shaped
// problem template of docs/problems-stripe.tmpl, as README's "Problems in
// your API's own shape" configures it, on the route POST /v1/customers.
func stripeGate(t *testing.T, up *Upstream, routeExtra string) *Gate {
	tmpl, err := filepath.Abs("../docs/problems-stripe.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	routes := "  - name: customers\n    match: \"POST /v1/customers\"\n    owner: authorization\n" + routeExtra
	sections := fmt.Sprintf("problems:\n  template: %q\n  content_type: application/json\n  headers:\n    key-reused: {Stripe-Should-Retry: \"false\"}\n", tmpl)
	return startGate(t, gateConfig{Upstream: up.URL, AdminToken: adminToken, Routes: routes, Sections: sections})
}

// TestStripeKeyReuseIsTyped: stripe-go parses only Stripe's error envelope.
// Given RFC 9457 it took idemgate's 422 key-reused for a failed exchange,
// retried it four times (about 8 s) and handed its caller an untyped error
// with no status. With the example template, the reuse reaches the caller
// at once as a *stripe.Error of type idempotency_error (status 422, code
// key-reused, the Stripe-Should-Retry: false of problems.headers), sent
// once; the first call's retry still replays its customer, and the
// upstream ran once. The admin listener keeps answering RFC 9457.
func TestStripeKeyReuseIsTyped(t *testing.T) {
	up := stripeUpstream(t, 0, nil)
	g := stripeGate(t, up, "")
	sc, sends := stripeClient(g)

	first, err := createCustomer(sc, "a@example.com", "cus-reuse-1")
	if err != nil || first.ID != "cus_1" {
		t.Fatalf("first create: %v %v", first, err)
	}
	sends.n.Store(0)
	start := time.Now()
	_, err = createCustomer(sc, "b@example.com", "cus-reuse-1")
	took := time.Since(start)
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("key reuse: stripe-go returned %T %v after %d sends in %v, want a *stripe.Error", err, err, sends.n.Load(), took)
	}
	var ie *stripe.IdempotencyError
	if se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 422 || se.Code != "key-reused" || !errors.As(err, &ie) || se.Msg == "" {
		t.Errorf("key reuse: %+v, want type idempotency_error, status 422, code key-reused, a message", se)
	}
	if se.LastResponse == nil || se.LastResponse.Header.Get("Stripe-Should-Retry") != "false" {
		t.Errorf("key reuse: response header %v, want Stripe-Should-Retry: false", se.LastResponse)
	}
	if n := sends.n.Load(); n != 1 {
		t.Errorf("key reuse was sent %d times (in %v), want once", n, took)
	}
	again, err := createCustomer(sc, "a@example.com", "cus-reuse-1")
	if err != nil || again.ID != first.ID {
		t.Errorf("retry of the first call: %v %v, want the replay of %s", again, err, first.ID)
	}
	if up.Total() != 1 {
		t.Errorf("upstream ran %d calls, want 1", up.Total())
	}

	resp, err := http.Get(g.AdminURL + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 404 || ct != "application/problem+json" {
		t.Errorf("admin listener: %d %q, want 404 application/problem+json", resp.StatusCode, ct)
	}
}

// TestStripeInProgressStillRetried: the example template leaves the kinds
// whose advice is "retry with the same key" in RFC 9457, which stripe-go
// does not decode and so retries: a duplicate sent while the first call
// is still running (concurrent: conflict, 409 request-in-progress) is
// retried by the library until the first call completes, and then gets
// its replay; the upstream ran once.
func TestStripeInProgressStillRetried(t *testing.T) {
	entered := make(chan struct{}, 1)
	up := stripeUpstream(t, 1200*time.Millisecond, entered)
	g := stripeGate(t, up, "    concurrent: conflict\n")
	sc, sends := stripeClient(g)

	type result struct {
		c   *stripe.Customer
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		c, err := createCustomer(sc, "a@example.com", "cus-slow-1")
		firstDone <- result{c, err}
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first call never reached the upstream")
	}
	dup, err := createCustomer(sc, "a@example.com", "cus-slow-1")
	first := <-firstDone
	if first.err != nil || err != nil || dup.ID != first.c.ID {
		t.Fatalf("first %v %v, duplicate %v %v: want both the one customer", first.c, first.err, dup, err)
	}
	if n := sends.n.Load(); n < 3 {
		t.Errorf("%d sends in all, want the duplicate retried at least once after its 409", n)
	}
	if up.Total() != 1 {
		t.Errorf("upstream ran %d calls, want 1", up.Total())
	}
	if !strings.Contains(g.Logs(), `"outcome":"conflict"`) {
		t.Errorf("no conflict answer in the access log:\n%s", g.Logs())
	}
}
