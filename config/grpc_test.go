package config

import (
	"strings"
	"testing"
)

// TestH2CUpstreamURL: h2c:// is an upstream scheme, globally and per
// route (HTTP/2 with prior knowledge without TLS, policy.SchemeH2C).
func TestH2CUpstreamURL(t *testing.T) {
	c, err := Load(writeFile(t, "upstream: {url: 'h2c://127.0.0.1:50051'}\n"+
		"routes: [{name: billing, match: 'POST /billing.v1.Billing/Charge', upstream: 'h2c://billing:50051'}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.URL.Scheme != "h2c" {
		t.Fatalf("upstream.url scheme %q", c.Upstream.URL.Scheme)
	}
	for _, r := range c.Policy.Routes() {
		if r.Name == "billing" && (r.Upstream == nil || r.Upstream.Scheme != "h2c") {
			t.Fatalf("route upstream %v", r.Upstream)
		}
	}
}

// TestReplayGRPCCodes: replay_grpc_codes takes names in any case and
// numbers, and refuses CANCELLED and DEADLINE_EXCEEDED, whose outcome is
// unknown.
func TestReplayGRPCCodes(t *testing.T) {
	c, err := Load(writeFile(t, base+"routes: [{name: a, match: 'POST /a.v1.A/Create', replay_grpc_codes: [OK, not_found, 14]}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := route(t, c, "a").ReplayGRPCCodes; len(got) != 3 || got[0] != 0 || got[1] != 5 || got[2] != 14 {
		t.Fatalf("replay_grpc_codes = %v", got)
	}
	if got := route(t, c, "default").GRPCCodeNames(); len(got) != 9 || got[1] != "INVALID_ARGUMENT" {
		t.Fatalf("default codes = %v", got)
	}
	for _, bad := range []string{"DEADLINE_EXCEEDED", "1", "17", "NOPE"} {
		_, err := Load(writeFile(t, base+"routes: [{name: a, match: /a, replay_grpc_codes: ["+bad+"]}]\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "routes[0].replay_grpc_codes") {
			t.Errorf("%s: %v, want an error naming routes[0].replay_grpc_codes", bad, err)
		}
	}
}

// TestGRPCMatch: `match: "grpc package.Service/Method"` is the POST route
// of that call; `grpc package.Service` covers its every method; a
// malformed one names the key.
func TestGRPCMatch(t *testing.T) {
	c, err := Load(writeFile(t, base+`routes:
  - {name: a, match: "grpc orders.v1.Orders/Create"}
  - {name: b, match: "grpc orders.v1.Billing"}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := route(t, c, "a").Match; m != "POST /orders.v1.Orders/Create" {
		t.Errorf("a: %q", m)
	}
	if m := route(t, c, "b").Match; m != "POST /orders.v1.Billing/" {
		t.Errorf("b: %q", m)
	}
	_, err = Load(writeFile(t, base+"routes: [{name: a, match: 'grpc /orders.v1.Orders/Create'}]\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "routes[0].match") {
		t.Errorf("malformed grpc match: %v", err)
	}
}

// TestProtobufFingerprintConfig: fingerprint.body: protobuf loads
// fingerprint.descriptors, whose digest enters the recipe; protobuf
// without descriptors, and descriptors that do not load, name the key.
func TestProtobufFingerprintConfig(t *testing.T) {
	set := writeFile(t, "not a descriptor set \xff\xff")
	for _, c := range []struct{ yaml, path string }{
		{"routes: [{name: a, match: /a, fingerprint: {body: protobuf}}]\n", "routes[0].fingerprint.descriptors"},
		{"routes: [{name: a, match: /a, fingerprint: {body: protobuf, descriptors: '" + set + "'}}]\n", "routes[0].fingerprint.descriptors"},
		{"routes: [{name: a, match: /a, fingerprint: {body: protobuf, descriptors: '/nonexistent.binpb'}}]\n", "routes[0].fingerprint.descriptors"},
	} {
		_, err := Load(writeFile(t, base+c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.path)
		}
	}
}
