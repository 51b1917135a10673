package tracing

// OTLP transport protocols of Config.Protocol, named as in
// OTEL_EXPORTER_OTLP_PROTOCOL (OpenTelemetry specification, "OTLP Exporter
// Configuration"): the values tracing.protocol accepts (config.ProtocolGRPC,
// config.ProtocolHTTPProtobuf, the same strings).
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Config is what Setup builds a tracer provider from: the `tracing:` section
// of the configuration. Its fields are config.TracingConfig's, name for name
// and type for type, so the binary passes tracing.Config(cfg.Tracing) and a
// field added to one and not the other stops the build, while this package
// does not depend on the configuration loader. Setup reads the
// OTEL_EXPORTER_OTLP_* and OTEL_EXPORTER_OTLP_TRACES_* environment variables
// for whatever Config leaves unset (Endpoint "", Insecure false), as the
// OpenTelemetry Go SDK does.
type Config struct {
	// Enabled turns tracing on; when false no exporter is built and no span
	// is recorded.
	Enabled bool
	// Endpoint is the collector: host:port, or an http(s) URL whose scheme
	// also chooses TLS. "" means OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's localhost:4317 (grpc) or
	// localhost:4318 (http/protobuf).
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTPProtobuf; any other value is
	// an error of Setup.
	Protocol string
	// Insecure sends spans without TLS (false: TLS, unless
	// OTEL_EXPORTER_OTLP_INSECURE or an http:// endpoint says otherwise).
	Insecure bool
	// SampleRatio is the fraction of new traces recorded, 0..1; a request
	// that carries a traceparent follows its parent's sampled flag instead.
	SampleRatio float64
	// ServiceName is the service.name resource attribute;
	// OTEL_SERVICE_NAME overrides it.
	ServiceName string
}
