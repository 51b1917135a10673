package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyListsGRPCMethods: `match: "grpc package.Service/Method"` is
// the call's POST route, and idemgate policy names the gRPC method (or
// service) and the grpc-status codes it stores.
func TestPolicyListsGRPCMethods(t *testing.T) {
	cfg := writePolicyConfig(t, `upstream: {url: "h2c://127.0.0.1:50051"}
defaults:
  owner: authorization
routes:
  - name: create
    match: "grpc orders.v1.Orders/Create"
    required: true
    replay_grpc_codes: [OK, ALREADY_EXISTS]
  - name: billing
    match: "grpc billing.v1.Billing"
  - name: rest
    match: "POST /v1/orders"
`)
	var doc publishedPolicy
	if err := json.Unmarshal([]byte(policyOutput(t, cfg, "json")), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]publishedRoute{}
	for _, r := range doc.Routes {
		got[r.Name] = r
	}
	if c := got["create"]; c.Path != "/orders.v1.Orders/Create" || c.GRPCMethod != "orders.v1.Orders/Create" ||
		strings.Join(c.Methods, ",") != "POST" || strings.Join(c.ReplayGRPCCodes, ",") != "OK,ALREADY_EXISTS" {
		t.Errorf("create = %+v", c)
	}
	if b := got["billing"]; b.Path != "/billing.v1.Billing/" || b.GRPCMethod != "billing.v1.Billing/*" || len(b.ReplayGRPCCodes) != 9 {
		t.Errorf("billing = %+v", b)
	}
	if r := got["rest"]; r.GRPCMethod != "" {
		t.Errorf("rest route listed as gRPC %q", r.GRPCMethod)
	}
	if md := policyOutput(t, cfg, "markdown"); !strings.Contains(md, "(gRPC `orders.v1.Orders/Create`)") || !strings.Contains(md, "stored by `grpc-status`, for OK, ALREADY_EXISTS") {
		t.Errorf("markdown:\n%s", md)
	}
}

// TestPolicyMarkdownReadsWell: the Markdown meant for API docs mentions
// gRPC only on routes that can receive a call (a gRPC route, the defaults
// route for every other path), not on a REST route or one without POST,
// and the characters a bare key may not hold are in code spans, not lost
// in the sentence (`except ", , and ;`).
func TestPolicyMarkdownReadsWell(t *testing.T) {
	cfg := writePolicyConfig(t, `upstream: {url: "h2c://127.0.0.1:50051"}
defaults:
  owner: authorization
routes:
  - name: create
    match: "grpc orders.v1.Orders/Create"
  - name: rest
    match: "POST /v1/orders"
  - name: patch
    match: "PATCH /v1/items/{id}"
`)
	md := policyOutput(t, cfg, "markdown")
	sections := strings.Split(md, "\n## ")[1:]
	want := map[string]bool{"/orders.v1.Orders/Create": true, "/v1/orders": false, "/v1/items/{id}": false, "on any other path": true}
	if len(sections) != len(want) {
		t.Fatalf("%d route sections, want %d:\n%s", len(sections), len(want), md)
	}
	for _, sec := range sections {
		title, _, _ := strings.Cut(sec, "\n")
		found := false
		for path, grpc := range want {
			if !strings.Contains(title, path) {
				continue
			}
			found = true
			if got := strings.Contains(sec, "**gRPC calls**"); got != grpc {
				t.Errorf("%s: gRPC bullet %v, want %v:\n%s", title, got, grpc, sec)
			}
		}
		if !found {
			t.Errorf("unexpected section %q", title)
		}
		if !strings.Contains(sec, "except `\"`, `,` and `;`") || strings.Contains(sec, `except ", , and ;`) {
			t.Errorf("%s: key syntax loses the characters a bare key may not hold:\n%s", title, sec)
		}
	}
}

// writePolicyConfig writes yaml to a configuration file in a temporary
// directory and returns its path.
func writePolicyConfig(t *testing.T, yaml string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// policyOutput runs idemgate policy on the configuration at cfg in format
// and returns what it printed; an exit other than 0 fails the test.
func policyOutput(t *testing.T, cfg, format string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := policyCommand([]string{"--config", cfg, "--format", format}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	return out.String()
}
