package config

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
)

func TestTracingDefaults(t *testing.T) {
	want := TracingConfig{Protocol: ProtocolGRPC, SampleRatio: 1, ServiceName: "idemgate"}
	if got := Default().Tracing; got != want {
		t.Errorf("Default().Tracing = %+v, want %+v", got, want)
	}
	if got := mustParse(t, base).Tracing; got != want {
		t.Errorf("file without tracing: %+v, want %+v", got, want)
	}
	c, err := Load("../config.example.yaml", nil)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if c.Tracing != want {
		t.Errorf("config.example.yaml tracing = %+v, want the defaults %+v", c.Tracing, want)
	}
}

func TestTracingFromFileAndEnv(t *testing.T) {
	c := mustParse(t, base+`
tracing:
  enabled: true
  endpoint: "http://127.0.0.1:4318"
  protocol: http/protobuf
  insecure: true
  sample_ratio: 0.25
  service_name: edge-gate
`)
	want := TracingConfig{Enabled: true, Endpoint: "http://127.0.0.1:4318", Protocol: ProtocolHTTPProtobuf,
		Insecure: true, SampleRatio: 0.25, ServiceName: "edge-gate"}
	if c.Tracing != want {
		t.Errorf("tracing = %+v, want %+v", c.Tracing, want)
	}

	c = mustParse(t, base, "IDEMGATE_TRACING_ENABLED=true", "IDEMGATE_TRACING_ENDPOINT=collector:4317",
		"IDEMGATE_TRACING_PROTOCOL=grpc", "IDEMGATE_TRACING_INSECURE=true", "IDEMGATE_TRACING_SAMPLE_RATIO=0.5",
		"IDEMGATE_TRACING_SERVICE_NAME=from-env")
	want = TracingConfig{Enabled: true, Endpoint: "collector:4317", Protocol: ProtocolGRPC,
		Insecure: true, SampleRatio: 0.5, ServiceName: "from-env"}
	if c.Tracing != want {
		t.Errorf("tracing from env = %+v, want %+v", c.Tracing, want)
	}
}

func TestTracingValidation(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, path, says string
	}{
		{"protocol", "tracing: {protocol: http}", "tracing.protocol", "grpc or http/protobuf"},
		{"endpoint without port", "tracing: {endpoint: collector}", "tracing.endpoint", "host:port or an http(s) URL"},
		{"endpoint scheme", "tracing: {endpoint: 'ftp://collector:21'}", "tracing.endpoint", "host:port or an http(s) URL"},
		{"endpoint without host", "tracing: {endpoint: 'http:///v1/traces'}", "tracing.endpoint", "no host"},
		{"ratio above 1", "tracing: {sample_ratio: 1.5}", "tracing.sample_ratio", "between 0 and 1"},
		{"ratio below 0", "tracing: {sample_ratio: -0.1}", "tracing.sample_ratio", "between 0 and 1"},
		{"service name", "tracing: {service_name: ' '}", "tracing.service_name", "must not be empty"},
		{"unknown key", "tracing: {exporter: otlp}", "tracing.exporter", "unknown key"},
		{"mistyped", "tracing: {enabled: perhaps}", "tracing.enabled", "bool"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, base+tt.yaml+"\n"), nil)
			if err == nil {
				t.Fatalf("Load accepted %s", tt.yaml)
			}
			found := false
			for _, e := range unjoin(errors.Unwrap(err)) {
				var fe *policy.FieldError
				if errors.As(e, &fe) && fe.Path == tt.path && strings.Contains(fe.Err.Error(), tt.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("error does not name %s saying %q:\n%v", tt.path, tt.says, err)
			}
		})
	}
}

// TestTracingValidatedWhenBuiltByHand covers flags or code that change a
// loaded Config and call Validate, including a NaN ratio that no YAML
// comparison would catch with a plain range check.
func TestTracingValidatedWhenBuiltByHand(t *testing.T) {
	c := mustParse(t, base)
	c.Tracing.SampleRatio = math.NaN()
	c.Tracing.Protocol = "udp"
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a NaN ratio and protocol udp")
	}
	for _, path := range []string{"tracing.sample_ratio", "tracing.protocol"} {
		if !strings.Contains(err.Error(), path+":") {
			t.Errorf("Validate does not name %s: %v", path, err)
		}
	}
	c.Tracing = TracingConfig{Enabled: true, Endpoint: "[::1]:4317", Protocol: ProtocolGRPC, SampleRatio: 0, ServiceName: "x"}
	if err := c.Validate(); err != nil {
		t.Errorf("valid tracing section rejected: %v", err)
	}
}
