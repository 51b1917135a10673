package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestREADMEQuickstartKeyReused: the 422 README's quickstart shows is the
// demo's real answer: every field the answer has is shown, with its value
// unless README elides it (…) or it changes per answer (Date,
// Content-Length), and the problem's members are the real ones.
func TestREADMEQuickstartKeyReused(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```\nHTTP/1.1 422 Unprocessable Entity\n")
	block, _, ok2 := strings.Cut(block, "```")
	head, body, ok3 := strings.Cut(block, "\n\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no 422 example in the quickstart")
	}
	shown := map[string]string{}
	for _, line := range strings.Split(head, "\n") {
		name, value, _ := strings.Cut(line, ": ")
		shown[http.CanonicalHeaderKey(name)] = value
	}

	api := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	g := startGateFlags(t, "demo", "--upstream", "http://"+api)
	if a := postAsBearer(10*time.Second, g.URL+"/v1/orders", "alice", "order-123", `{"amount":5}`); a.Status != http.StatusCreated {
		t.Fatalf("first request: %v", a)
	}
	a := postAsBearer(10*time.Second, g.URL+"/v1/orders", "alice", "order-123", `{"amount":6}`)
	if a.Status != http.StatusUnprocessableEntity {
		t.Fatalf("the key reused: %v", a)
	}
	for name := range a.Header {
		value, ok := shown[name]
		switch {
		case !ok:
			t.Errorf("README's 422 leaves out %s: %s", name, a.Header.Get(name))
		case name == "Date" || name == "Content-Length" || strings.Contains(value, "…"):
		case value != a.Header.Get(name):
			t.Errorf("README's 422 shows %s: %s, the answer has %s", name, value, a.Header.Get(name))
		}
	}
	for name := range shown {
		if a.Header.Get(name) == "" {
			t.Errorf("README's 422 shows %s, which the answer does not have", name)
		}
	}
	var readme, real map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &readme); err != nil {
		t.Fatalf("README's 422 body: %v", err)
	}
	if err := json.Unmarshal(a.Body, &real); err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(readme)), slices.Sorted(maps.Keys(real)); !slices.Equal(got, want) {
		t.Errorf("README's 422 body has the members %v, the answer %v: %s", got, want, a.Body)
	}
}
