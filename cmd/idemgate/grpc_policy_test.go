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
	cfg := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(cfg, []byte(`upstream: {url: "h2c://127.0.0.1:50051"}
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
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := policyCommand([]string{"--config", cfg, "--format", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc publishedPolicy
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
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
	out.Reset()
	if code := policyCommand([]string{"--config", cfg, "--format", "markdown"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if md := out.String(); !strings.Contains(md, "(gRPC `orders.v1.Orders/Create`)") || !strings.Contains(md, "stored by `grpc-status`, for OK, ALREADY_EXISTS") {
		t.Errorf("markdown:\n%s", md)
	}
}
