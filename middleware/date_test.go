package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestReplayRepeatsTheFirstAnswersDate: the handler sets no Date; the
// first answer carries one, and its replay a second later repeats it, as
// the proxy repeats an upstream's (README, Quickstart: "Date included").
func TestReplayRepeatsTheFirstAnswersDate(t *testing.T) {
	srv := valkeytest.Start(t)
	gate := serve(t, testConfig(srv.Addr(), "date:"), newOrders())

	first := mustPost(t, gate.URL, "alice", "k-date", `{"item":1}`)
	stamped, err := http.ParseTime(first.header.Get("Date"))
	if first.status != http.StatusCreated || err != nil {
		t.Fatalf("first: %d, Date %q (%v)", first.status, first.header.Get("Date"), err)
	}
	// Into a later second than the first answer's Date (waits on the
	// clock, races nothing).
	next := stamped.Add(time.Second)
	for time.Now().Before(next) {
		time.Sleep(time.Until(next))
	}
	retry := mustPost(t, gate.URL, "alice", "k-date", `{"item":1}`)
	if retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry not replayed: %d %s", retry.status, retry.body)
	}
	if got, want := retry.header.Get("Date"), first.header.Get("Date"); got != want {
		t.Errorf("replay Date %q, first answer's %q: want the first answer's repeated", got, want)
	}
}
