package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestInitFromOpenAPI generates a configuration with the real binary's
// `init --from-openapi` and serves it, unedited, in front of an upstream
// that counts what it executes, under a server path prefix (/api). One
// operation per rule: a required key, a JSON body resent in another member
// order that replays, a path template with a parameter and an optional key
// (keyed: once; unkeyed: passes each time), and a GET that passes.
func TestInitFromOpenAPI(t *testing.T) {
	var mu sync.Mutex
	executed := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		executed[r.Method+" "+r.URL.Path]++
		n := executed[r.Method+" "+r.URL.Path]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if r.Method == http.MethodPost {
			status = http.StatusCreated
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"n":%d,"path":%q,"body":%q}`, n, r.URL.Path, body)
	}))
	t.Cleanup(up.Close)
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return executed[k]
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "idemgate.yaml")
	spec := filepath.Join("..", "config", "fromopenapi", "testdata", "synthetic", "e2e.yaml")
	cmd := exec.Command(binary, "init", "--from-openapi", spec, "--upstream", up.URL+"/api", "--out", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("init: %v\n%s", err, stderr.String())
	}
	if want := "idemgate init: read 3 operations: 2 routes written, 1 safe"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("summary %q, want it to start with %q", stderr.String(), want)
	}
	if out, err := exec.Command(binary, "validate", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("validate on the generated configuration: %v\n%s", err, out)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	admin := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	g := runGate(t, listen, admin, cfg, "--listen", listen, "--admin-listen", admin)

	send := func(method, path, key, body string) (int, bool) {
		t.Helper()
		req, err := http.NewRequest(method, g.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true"
	}

	// Required key (the description marks it required): refused, never forwarded.
	if status, _ := send("POST", "/v1/orders", "", `{"amount":5}`); status != http.StatusBadRequest {
		t.Errorf("POST /v1/orders without its required key: %d, want 400", status)
	}
	if n := count("POST /api/v1/orders"); n != 0 {
		t.Fatalf("a request without the required key reached the upstream %d times", n)
	}

	// JSON body (body: json): the retry's members in another order replay.
	if status, replayed := send("POST", "/v1/orders", "order-1", `{"amount":5,"currency":"eur"}`); status != http.StatusCreated || replayed {
		t.Errorf("first create: %d replayed=%v", status, replayed)
	}
	if status, replayed := send("POST", "/v1/orders", "order-1", `{ "currency": "eur", "amount": 5 }`); status != http.StatusCreated || !replayed {
		t.Errorf("retry with the members reordered: %d replayed=%v, want the stored 201", status, replayed)
	}
	if n := count("POST /api/v1/orders"); n != 1 {
		t.Errorf("create executed %d times, want 1", n)
	}

	// Path template with a parameter, optional key: keyed, it runs once.
	for i := range 2 {
		if status, replayed := send("POST", "/v1/orders/ord_7/capture", "cap-1", `{"amount":5}`); status != http.StatusCreated || replayed != (i == 1) {
			t.Errorf("capture %d: %d replayed=%v", i, status, replayed)
		}
	}
	if n := count("POST /api/v1/orders/ord_7/capture"); n != 1 {
		t.Errorf("keyed capture executed %d times, want 1", n)
	}
	// Optional key: a request without one passes, unprotected, each time.
	for range 2 {
		if status, replayed := send("POST", "/v1/orders/ord_7/capture", "", `{"amount":5}`); status != http.StatusCreated || replayed {
			t.Errorf("unkeyed capture: %d replayed=%v", status, replayed)
		}
	}
	if n := count("POST /api/v1/orders/ord_7/capture"); n != 3 {
		t.Errorf("capture executed %d times after two unkeyed requests, want 3", n)
	}

	// GET passes through, each time, even with a key.
	for range 2 {
		if status, replayed := send("GET", "/v1/orders/ord_7", "get-1", ""); status != http.StatusOK || replayed {
			t.Errorf("GET: %d replayed=%v", status, replayed)
		}
	}
	if n := count("GET /api/v1/orders/ord_7"); n != 2 {
		t.Errorf("GET executed %d times, want 2", n)
	}
}
