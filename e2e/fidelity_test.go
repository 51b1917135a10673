package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/klauspost/compress/gzip"
)

// rawClient sends exactly the fields it is given, as curl does: no
// Accept-Encoding unless set, and no transparent decompression.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}

// send posts body with owner alice and key through c, with the extra
// fields (name, value pairs), and reads the whole answer.
func send(t *testing.T, c *http.Client, url, key, body string, fields ...string) (Answer, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the body: %v", url, err)
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}, resp
}

func compressed(t *testing.T, coding string, plain []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "br":
		w = brotli.NewWriter(&b)
	default:
		return plain // a coding the test only labels
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestReplayDecodesForClientsWithoutTheCoding: a response stored with
// Content-Encoding gzip or br, first asked for by a client that accepts
// both, is replayed decoded to a curl-like client (no Accept-Encoding) and
// to Go's client (which asks for gzip only and decodes gzip itself), and as
// stored to a client that accepts it; the upstream runs once. A replay
// that passed the stored coding on unconditionally gave the curl-like
// client the compressed bytes with Content-Encoding br or gzip, and Go's
// client br bytes it could not read.
func TestReplayDecodesForClientsWithoutTheCoding(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})
	plain := []byte(strings.Repeat(`{"order":"ord_1","items":[1,2,3]}`, 40))
	for _, coding := range []string{"gzip", "br"} {
		t.Run(coding, func(t *testing.T) {
			encoded := compressed(t, coding, plain)
			up.Set(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", coding)
				w.Header().Set("Vary", "Accept-Encoding")
				w.Header().Set("ETag", `"ord-1-v1"`)
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(encoded)
			}, 0, nil)
			key := "ce-" + coding
			first, _ := send(t, rawClient, g.URL+"/v1/orders", key, `{"n":1}`, "Accept-Encoding", "gzip, br")
			if first.Status != 201 || first.Header.Get("Content-Encoding") != coding || !bytes.Equal(first.Body, encoded) {
				t.Fatalf("first answer: %d %v, %d bytes; want 201 %s as the upstream sent it", first.Status, first.Header, len(first.Body), coding)
			}

			curl, _ := send(t, rawClient, g.URL+"/v1/orders", key, `{"n":1}`)
			if curl.Status != 201 || !curl.replayed() {
				t.Fatalf("curl-like retry: %d %v", curl.Status, curl.Header)
			}
			if !bytes.Equal(curl.Body, plain) || curl.Header.Get("Content-Encoding") != "" {
				t.Fatalf("curl-like retry: Content-Encoding %q, body %q; want the decoded body", curl.Header.Get("Content-Encoding"), curl.Body)
			}
			if cl := curl.Header.Get("Content-Length"); cl != strconv.Itoa(len(plain)) {
				t.Errorf("curl-like retry: Content-Length %s, want %d", cl, len(plain))
			}
			if et := curl.Header.Get("ETag"); et != `W/"ord-1-v1"` {
				t.Errorf("curl-like retry: ETag %q, want the weakened tag", et)
			}
			if v := curl.Header.Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("curl-like retry: Vary %q, want it kept", v)
			}

			goAns, goResp := send(t, &http.Client{Timeout: 10 * time.Second}, g.URL+"/v1/orders", key, `{"n":1}`)
			if goAns.Status != 201 || !goAns.replayed() || !bytes.Equal(goAns.Body, plain) {
				t.Fatalf("Go client retry: %d %v, body %q; want the usable body", goAns.Status, goAns.Header, goAns.Body)
			}
			// gzip reaches Go's client as stored and its transport decodes
			// it; br is decoded by idemgate.
			if wantUncompressed := coding == "gzip"; goResp.Uncompressed != wantUncompressed {
				t.Errorf("Go client retry: Uncompressed = %v, want %v", goResp.Uncompressed, wantUncompressed)
			}

			same, _ := send(t, rawClient, g.URL+"/v1/orders", key, `{"n":1}`, "Accept-Encoding", coding)
			if same.Header.Get("Content-Encoding") != coding || !bytes.Equal(same.Body, encoded) || same.Header.Get("ETag") != `"ord-1-v1"` {
				t.Errorf("retry accepting %s: %v, %d bytes; want the stored form", coding, same.Header, len(same.Body))
			}
			if n := up.Calls("alice", key); n != 1 {
				t.Fatalf("upstream executed %d times, want 1", n)
			}
		})
	}
	t.Run("unknown coding", func(t *testing.T) {
		up.Set(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "compress")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("LZW bytes"))
		}, 0, nil)
		send(t, rawClient, g.URL+"/v1/orders", "ce-unknown", `{"n":1}`, "Accept-Encoding", "compress")
		again, _ := send(t, rawClient, g.URL+"/v1/orders", "ce-unknown", `{"n":1}`)
		if !again.replayed() || again.Header.Get("Content-Encoding") != "compress" || string(again.Body) != "LZW bytes" {
			t.Fatalf("retry: %v %q; want the stored response as stored", again.Header, again.Body)
		}
		if !gatetest.Until(5*time.Second, func() bool {
			return strings.Contains(g.Logs(), "not decoded for a client that does not accept its content coding")
		}) {
			t.Fatal("no log line for the coding idemgate cannot decode")
		}
	})
}

// TestTrailersKeptAndReplayed: an upstream that answers chunked with
// trailers (a checksum computed while streaming, a gRPC-style status) has
// them reach the client in the first answer, in every replay (chunked,
// announced in Trailer), and in a passed-through non-replayable answer.
// Trailers used to be lost in all three.
func TestTrailersKeptAndReplayed(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL})
	status := http.StatusCreated
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Trailer", "X-Checksum, Grpc-Status")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "part one;")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "part two")
		w.Header().Set("X-Checksum", "sha256=abc")
		w.Header().Set("Grpc-Status", "0")
	}, 0, nil)
	check := func(what string, a Answer, resp *http.Response, wantStatus int) {
		t.Helper()
		if a.Status != wantStatus || string(a.Body) != "part one;part two" {
			t.Fatalf("%s: %d %q", what, a.Status, a.Body)
		}
		if got := resp.Trailer.Get("X-Checksum"); got != "sha256=abc" {
			t.Errorf("%s: trailer X-Checksum = %q (trailers %v), want sha256=abc", what, got, resp.Trailer)
		}
		if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
			t.Errorf("%s: trailer Grpc-Status = %q, want 0", what, got)
		}
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Errorf("%s: Transfer-Encoding %v, want chunked", what, resp.TransferEncoding)
		}
	}
	first, resp := send(t, rawClient, g.URL+"/v1/orders", "tr-1", `{"n":1}`)
	check("first answer", first, resp, 201)
	for i := range 2 {
		again, resp := send(t, rawClient, g.URL+"/v1/orders", "tr-1", `{"n":1}`)
		if !again.replayed() {
			t.Fatalf("retry %d not replayed: %v", i, again.Header)
		}
		check("replay", again, resp, 201)
	}
	if n := up.Calls("alice", "tr-1"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
	status = http.StatusInternalServerError // not replayable: passed through
	up.Set(up.Handler, 0, nil)
	failed, resp := send(t, rawClient, g.URL+"/v1/orders", "tr-2", `{"n":2}`)
	check("passed-through 500", failed, resp, 500)
}

// runValidate runs `idemgate validate` on config and returns its exit code
// and output.
func runValidate(t *testing.T, config string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "validate", "--config", path).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("idemgate validate: %v\n%s", err, out)
	return 0, ""
}

// TestValidateRejectsBareWordHost: `match: "POST v1/orders"` (a
// forgotten leading slash) read as host v1 and never matched; validate now
// refuses it, naming the route and suggesting the path, and prints host
// and path apart for the routes it accepts.
func TestValidateRejectsBareWordHost(t *testing.T) {
	base := "upstream:\n  url: http://127.0.0.1:1\n"
	code, out := runValidate(t, base+"routes:\n  - name: orders\n    match: \"POST v1/orders\"\n")
	if code == 0 || !strings.Contains(out, `routes[0].match: route "orders": pattern "POST v1/orders" reads as host "v1" and path "/orders"`) ||
		!strings.Contains(out, `write "POST /v1/orders"`) {
		t.Fatalf("validate = %d:\n%s\nwant a refusal naming the route and suggesting POST /v1/orders", code, out)
	}
	code, out = runValidate(t, base+`routes:
  - name: orders
    match: "POST /v1/orders"
  - name: partner
    match: "POST api.example.com/v1/orders"
  - name: local
    match: "POST localhost/v1/orders"
  - name: ported
    match: "POST gateway:8443/v1/orders"
`)
	if code != 0 {
		t.Fatalf("validate = %d:\n%s", code, out)
	}
	for _, want := range []string{"  host: any\n  path: \"/v1/orders\"\n", "  host: api.example.com\n  path: \"/v1/orders\"\n",
		"  host: localhost\n", "  host: gateway:8443\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

// TestMediaTypeParameters pins what a retry gets whose Content-Type
// differs from the first request's only by a default parameter: 422 under
// the default media_types: exact, a replay under media_types: normalize.
func TestMediaTypeParameters(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: `  - name: normalized
    match: "POST /v1/normalized"
    fingerprint: {media_types: normalize}
`})
	for _, c := range []struct {
		path string
		want int
	}{{"/v1/orders", 422}, {"/v1/normalized", 201}} {
		key := "mt" + strings.ReplaceAll(c.path, "/", "-")
		first, _ := send(t, rawClient, g.URL+c.path, key, `{"n":1}`, "Content-Type", "application/json")
		if first.Status != 201 {
			t.Fatalf("%s first: %d %s", c.path, first.Status, first.Body)
		}
		retry, _ := send(t, rawClient, g.URL+c.path, key, `{"n":1}`, "Content-Type", "Application/JSON; charset=UTF-8")
		if retry.Status != c.want || (c.want == 201 && (!retry.replayed() || !bytes.Equal(retry.Body, first.Body))) {
			t.Errorf("%s retry with charset: %d replayed=%v %s; want %d", c.path, retry.Status, retry.replayed(), retry.Body, c.want)
		}
		if n := up.Calls("alice", key); n != 1 {
			t.Errorf("%s: upstream executed %d times, want 1", c.path, n)
		}
	}
}

// TestExpiryAdvertised: with advertise_expiry the first answer and every
// replay carry Idempotency-Key-Expires, an HTTP-date one retention after
// the completion, never later than the record's end; without it, none.
func TestExpiryAdvertised(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: `  - name: advertised
    match: "POST /v1/advertised"
    retention: 1h
    advertise_expiry: true
`})
	before := time.Now().Truncate(time.Second)
	first, _ := send(t, rawClient, g.URL+"/v1/advertised", "exp-1", `{"n":1}`)
	after := time.Now()
	exp, err := http.ParseTime(first.Header.Get("Idempotency-Key-Expires"))
	if first.Status != 201 || err != nil {
		t.Fatalf("first answer: %d, Idempotency-Key-Expires %q: %v", first.Status, first.Header.Get("Idempotency-Key-Expires"), err)
	}
	if exp.Before(before.Add(time.Hour)) || exp.After(after.Add(time.Hour)) {
		t.Fatalf("first answer expires %v, want within [%v, %v]", exp, before.Add(time.Hour), after.Add(time.Hour))
	}
	again, _ := send(t, rawClient, g.URL+"/v1/advertised", "exp-1", `{"n":1}`)
	rexp, err := http.ParseTime(again.Header.Get("Idempotency-Key-Expires"))
	if !again.replayed() || err != nil || rexp.Before(exp) || rexp.Sub(exp) > time.Second {
		t.Fatalf("replay: replayed=%v, Idempotency-Key-Expires %q (%v); want the first answer's date (or the second after)",
			again.replayed(), again.Header.Get("Idempotency-Key-Expires"), err)
	}
	plain, _ := send(t, rawClient, g.URL+"/v1/orders", "exp-2", `{"n":1}`)
	if v := plain.Header.Get("Idempotency-Key-Expires"); plain.Status != 201 || v != "" {
		t.Fatalf("route without advertise_expiry: %d, Idempotency-Key-Expires %q; want none", plain.Status, v)
	}
}

// TestProblemsPublished: with problems.type_base and problems.docs_url,
// a client's problem response names its type under the operator's base
// (the catalog's slug kept) and links the documentation (draft section
// 2.7); without them, idemgate's own base and no Link.
func TestProblemsPublished(t *testing.T) {
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Sections: `problems:
  docs_url: https://api.example.com/docs/idempotency
  type_base: https://api.example.com/problems/
`})
	plain := startGate(t, gateConfig{Upstream: up.URL})
	send(t, rawClient, g.URL+"/v1/orders", "pb-1", `{"n":1}`)
	for _, c := range []struct {
		gate     *Gate
		typ, lnk string
	}{
		{g, "https://api.example.com/problems/key-reused", `<https://api.example.com/docs/idempotency>; rel="describedby"`},
		{plain, "https://idemgate.dev/problems/key-reused", ""},
	} {
		send(t, rawClient, c.gate.URL+"/v1/orders", "pb-1", `{"n":1}`)
		a, _ := send(t, rawClient, c.gate.URL+"/v1/orders", "pb-1", `{"n":2}`)
		var d struct{ Type string }
		if err := json.Unmarshal(a.Body, &d); err != nil || a.Status != 422 || d.Type != c.typ {
			t.Errorf("%s: %d %s (%v); want 422 of type %s", c.gate.URL, a.Status, a.Body, err, c.typ)
		}
		if l := a.Header.Get("Link"); l != c.lnk {
			t.Errorf("%s: Link %q, want %q", c.gate.URL, l, c.lnk)
		}
	}
}
