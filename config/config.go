package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/valkey"
)

// Store drivers.
const (
	DriverMemory = "memory"
	DriverValkey = "valkey"
	DriverBolt   = "bolt"
	// DriverPostgres keeps records in a PostgreSQL table (store/postgres).
	DriverPostgres = "postgres"
)

// OTLP transport protocols of tracing.protocol, named as in
// OTEL_EXPORTER_OTLP_PROTOCOL (OpenTelemetry specification, "OTLP Exporter
// Configuration"); the same strings as tracing.ProtocolGRPC and
// tracing.ProtocolHTTPProtobuf, which Setup switches on.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Config is the whole effective configuration: file, then environment, then
// the overrides (flags) given to Load with WithOverrides.
type Config struct {
	// Listen is the proxy's listen address, host:port (default ":8080").
	Listen string
	// Upstream is the backend every enforced request is forwarded to.
	Upstream UpstreamConfig
	// Admin is the operations listener (/metrics /healthz /readyz /admin/).
	Admin AdminConfig
	// Store selects and configures the record store.
	Store StoreConfig
	// Log configures the slog handler.
	Log LogConfig
	// Server holds the proxy listener's http.Server limits.
	Server ServerConfig
	// Tracing configures OpenTelemetry tracing (off by default).
	Tracing TracingConfig
	// Problems says how problem responses are published.
	Problems ProblemsConfig
	// Policy is the compiled route policy (`defaults:` and `routes:`).
	Policy *policy.Policy
}

// UpstreamConfig is the `upstream:` section.
type UpstreamConfig struct {
	// URL is the absolute http, https or h2c URL of the backend
	// (upstream.url); h2c:// speaks HTTP/2 with prior knowledge without
	// TLS (policy.SchemeH2C), as a gRPC server usually does in a cluster.
	URL *url.URL
	// Timeout bounds one upstream exchange; past it the client gets 504
	// (upstream.timeout, default 60s).
	Timeout time.Duration
	// TLS is `upstream.tls:`, for every https upstream.
	TLS UpstreamTLSConfig
	// PassHost (upstream.pass_host) sends the client's Host field to the
	// upstream instead of the upstream URL's host, like Traefik's
	// passHostHeader; default false.
	PassHost bool
}

// AdminConfig is the `admin:` section.
type AdminConfig struct {
	// Listen is the admin listen address, host:port (default
	// "127.0.0.1:9090").
	Listen string
	// Token is the bearer token that /admin/ requires (admin.token,
	// IDEMGATE_ADMIN_TOKEN); "" if none was configured.
	Token string
}

// StoreConfig is the `store:` section.
type StoreConfig struct {
	// Driver is memory (default), valkey, bolt or postgres.
	Driver string
	// Valkey configures the valkey driver.
	Valkey ValkeyConfig
	// Bolt configures the bolt driver.
	Bolt BoltConfig
	// Postgres configures the postgres driver.
	Postgres PostgresConfig
	// V1Lookup (store.v1_lookup, default true; false when loaded with
	// InProcess unless the file sets it) makes a new key also look
	// for a record written before layout 2, which scoped records by route
	// name (docs/protocol.md, "Layout versions"): one more store read per
	// fresh key, so that operations completed before an upgrade keep
	// replaying. Set it false once the longest retention has passed since
	// the upgrade, or on a store that never held layout 1 records.
	V1Lookup bool
}

// ValkeyConfig is the `store.valkey:` section.
type ValkeyConfig struct {
	// Addrs are host:port addresses: one for a single node, several for
	// Cluster, or the sentinels when SentinelMaster is set.
	Addrs []string
	// Username and Password authenticate (AUTH); empty means none.
	Username, Password string
	// TLS enables TLS to every address.
	TLS bool
	// KeyPrefix starts every key idemgate writes (default "idemgate:").
	KeyPrefix string
	// SentinelMaster, when set, is the Sentinel master name to follow.
	SentinelMaster string
	// Acks is `store.valkey.acks`: replica acknowledgements of every
	// claim, lease extension and completion (docs/durability.md).
	Acks AcksConfig
	// CacheBytes is `store.valkey.cache_bytes`: the bound, in bytes, of the
	// replay cache that answers retries of records this instance has seen
	// completed with no round trip (docs/performance.md, "Replay cache";
	// valkey.Options CacheBytes says how it is split); default
	// DefaultCacheBytes, 0 off.
	CacheBytes int64
	// Layout is `store.valkey.layout`: the stored layout new records are
	// written in, 3 (DefaultValkeyLayout), 4 or 5 (valkey.Options Layout;
	// docs/protocol.md, "Rolling upgrade to layout 4" and "Rolling upgrade
	// to layout 5"). This build reads all three; builds before it read only
	// the layouts before theirs, so a layout is for once every instance
	// runs a build that reads it.
	Layout int
	// MaxFlushDelay is `store.valkey.max_flush_delay`: how long, at most,
	// a connection to Valkey waits after each write while other commands
	// are in flight on it, so that they leave together (valkey.Options
	// MaxFlushDelay); default 0 (off: on the bench it cut no CPU per
	// fresh key and cost latency at low concurrency, docs/performance.md,
	// "Pipeline flush delay"), at most MaxValkeyMaxFlushDelay.
	MaxFlushDelay time.Duration
	// Connections is `store.valkey.connections`: how many pipelined
	// connections carry the store's commands to each Valkey server, a
	// power of two from 1 to valkey.MaxConnections (valkey.Options
	// Connections); default valkey.DefaultConnections, 1.
	Connections int
}

// DefaultValkeyLayout is store.valkey.layout when unset: layout 3, which
// every build reads.
const DefaultValkeyLayout = 3

// MaxValkeyMaxFlushDelay bounds store.valkey.max_flush_delay: a longer
// pause adds latency to every round trip under load and gathers few more
// commands.
const MaxValkeyMaxFlushDelay = time.Millisecond

// DefaultCacheBytes is store.valkey.cache_bytes when unset: 32 MiB, a
// few tens of thousands of typical completed records.
const DefaultCacheBytes = 32 << 20

// MaxAckTimeout bounds store.valkey.acks.timeout: the acknowledgement and
// the script's round trip must fit in one store operation's 2 s
// (proxy.DefaultStoreTimeout), or a slow acknowledgement would surface as a
// timeout instead of "not acknowledged".
const MaxAckTimeout = 1500 * time.Millisecond

// MaxAckReplicas bounds store.valkey.acks.replicas.
const MaxAckReplicas = 64

// AcksConfig is the `store.valkey.acks:` section.
type AcksConfig struct {
	// Replicas is how many replicas must acknowledge each claim, extension
	// and completion (WAIT) before it counts; 0 (default) = off. A claim
	// not acknowledged in time is not forwarded (503 store-unavailable).
	Replicas int
	// AOFLocal (aof_local) makes the acknowledgement WAITAOF 1 Replicas
	// Timeout: the write is fsynced on the primary too, and only replicas
	// that fsynced it count; primary and replicas need appendonly yes.
	AOFLocal bool
	// Timeout is the longest wait for the acknowledgements (default 500ms;
	// 1ms..MaxAckTimeout).
	Timeout time.Duration
}

// On reports whether any acknowledgement is asked for.
func (a AcksConfig) On() bool { return a.Replicas > 0 || a.AOFLocal }

// BoltConfig is the `store.bolt:` section.
type BoltConfig struct {
	// Path is the database file (default "/var/lib/idemgate/idemgate.db").
	Path string
}

// PostgresConfig is the `store.postgres:` section.
type PostgresConfig struct {
	// DSN is a libpq connection URL or key=value string (prefer
	// IDEMGATE_STORE_POSTGRES_DSN: it may hold a password).
	DSN string
	// Table is the records table, "name" or "schema.name" (default
	// "idemgate_records"; postgres.ValidateTable says what is allowed).
	Table string
	// MaxConns caps the connection pool; 0 keeps the DSN's pool_max_conns
	// or pgxpool's default (the larger of 4 and the CPU count).
	MaxConns int
}

// maxPostgresConns bounds store.postgres.max_conns.
const maxPostgresConns = 10000

// LogConfig is the `log:` section.
type LogConfig struct {
	// Format is text (default) or json.
	Format string
	// Level is debug, info (default), warn or error.
	Level string
	// Access (log.access, default true) writes one info line per request,
	// enforced or not (docs/operations.md, "Access log"); the Go middleware
	// writes it only when middleware.Options.AccessLog asks for it as well.
	Access bool
	// Query (log.query, default true) logs the path with its query string
	// in the access line; false logs the path alone, for APIs whose query
	// strings carry secrets (tokens, signatures).
	Query bool
}

// ServerConfig is the `server:` section: the proxy http.Server's limits.
// A zero duration means no limit, as in net/http.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading request headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (default 60s).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response from the end of the request
	// headers (default 0: none, the upstream timeout bounds the exchange);
	// when set it must exceed upstream.timeout.
	WriteTimeout time.Duration
	// IdleTimeout bounds keep-alive idleness (default 120s).
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful drain after SIGTERM: waiting for
	// requests in flight to get their upstream answer, record it in the
	// store and write it, then for responses still being recorded in the
	// background (server.shutdown_timeout; default upstream.timeout +
	// ShutdownMargin, 65s with the defaults; 0 means no limit). When set it
	// must exceed upstream.timeout, or a call in flight at SIGTERM is cut
	// off after the upstream may have acted.
	ShutdownTimeout time.Duration
	// MaxHeaderBytes bounds request headers, in bytes (default 1 MiB).
	MaxHeaderBytes int
	// TLS is `server.tls:`, TLS and mTLS on the proxy listener.
	TLS ServerTLSConfig
	// TrustedProxies (server.trusted_proxies) are the CIDRs or addresses of
	// peers whose X-Forwarded-For and Forwarded fields idemgate appends to
	// instead of replacing: the load balancers in front of it.
	TrustedProxies []string
	// MaxWaiters caps the requests this instance holds waiting on a
	// running record of their key (server.max_waiters; default
	// DefaultMaxWaiters(), 1024 per GOMAXPROCS; 0 means no limit, and
	// proxy.Options.MaxWaiters takes the value as it is).
	// Past it a duplicate gets 409 request-in-progress with Retry-After at
	// once, so a slow key cannot pin unbounded goroutines and connections.
	MaxWaiters int
	// MaxStoreWaiting bounds the keyed requests this instance holds
	// waiting for a store answer to their claim at once
	// (server.max_store_waiting; default DefaultMaxStoreWaiting, derived
	// from the store's pool; 0 means no limit). Past it a new keyed
	// request gets 503 overloaded with Retry-After at once, and nothing is
	// claimed or forwarded, instead of queueing for the store until its
	// timeout and failing closed then.
	MaxStoreWaiting int
	// H2C (server.h2c, default false) serves HTTP/2 without TLS on the
	// plain proxy listener, to clients with prior knowledge (RFC 9113
	// section 3.3; curl --http2-prior-knowledge, gRPC without TLS), beside
	// HTTP/1.1: net/http's http.Protocols with UnencryptedHTTP2. Off, the
	// preface is answered 505 http2-preface. Not with server.tls, whose
	// listener negotiates HTTP/2 by ALPN already. The HTTP/1.1 Upgrade to
	// h2c is never served.
	H2C bool
}

// TracingConfig is the `tracing:` section: OpenTelemetry spans exported over
// OTLP. The exporter also honours the OTEL_EXPORTER_OTLP_* and
// OTEL_EXPORTER_OTLP_TRACES_* environment variables for whatever this
// section leaves unset (endpoint "", insecure false), as the OpenTelemetry
// Go SDK reads them itself. The binary hands it to tracing.Setup converted
// to tracing.Config, whose fields are these, name for name and type for type.
type TracingConfig struct {
	// Enabled turns tracing on (tracing.enabled, default false); when false
	// no exporter is built and no span is recorded.
	Enabled bool
	// Endpoint is the collector: host:port, or an http(s) URL whose scheme
	// also chooses TLS. "" (default) means OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// or OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's localhost:4317 (grpc) or
	// localhost:4318 (http/protobuf).
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTPProtobuf.
	Protocol string
	// Insecure sends spans without TLS (default false: TLS, unless
	// OTEL_EXPORTER_OTLP_INSECURE or an http:// endpoint says otherwise).
	Insecure bool
	// SampleRatio is the fraction of new traces recorded, 0..1 (default 1);
	// a request that carries a traceparent follows its parent's sampled
	// flag instead.
	SampleRatio float64
	// ServiceName is the service.name resource attribute (default
	// "idemgate"); OTEL_SERVICE_NAME overrides it.
	ServiceName string
}

// ProblemsConfig is the `problems:` section: how the problem responses
// clients get are published (problem.Publisher).
type ProblemsConfig struct {
	// DocsURL (problems.docs_url), when set, is sent with every problem
	// response as Link: <DocsURL>; rel="describedby" (Idempotency-Key
	// draft, section 2.7): where the API documents its idempotency.
	DocsURL string
	// TypeBase (problems.type_base) replaces problem.Base in every problem
	// type URI, so types resolve under the operator's own domain; the
	// slugs stay. "" keeps problem.Base. An absolute http(s) URL ending in
	// "/" or "#".
	TypeBase string
}

// ShutdownMargin is what the default server.shutdown_timeout adds to
// upstream.timeout: time for the last call's store write (at most
// proxy.DefaultStoreTimeout, 2s) and for writing its response after the
// upstream answered at the very end of its timeout.
const ShutdownMargin = 5 * time.Second

// defaultUpstreamTimeout is upstream.timeout unless configured.
const defaultUpstreamTimeout = 60 * time.Second

// Default returns the built-in configuration: listen ":8080", admin
// "127.0.0.1:9090", memory store, text logs at info, the server defaults
// and a policy of only the defaults route (policy.DefaultRoute). Upstream.URL
// is nil: the caller sets it (e.g. from --upstream) and calls Validate.
func Default() *Config {
	p, err := policy.New(policy.DefaultRoute(), nil)
	if err != nil {
		panic("config: built-in defaults do not compile: " + err.Error())
	}
	return &Config{
		Listen:   ":8080",
		Upstream: UpstreamConfig{Timeout: defaultUpstreamTimeout},
		Admin:    AdminConfig{Listen: "127.0.0.1:9090"},
		Store: StoreConfig{
			Driver:   DriverMemory,
			V1Lookup: true,
			Valkey:   ValkeyConfig{KeyPrefix: "idemgate:", Acks: AcksConfig{Timeout: 500 * time.Millisecond}, CacheBytes: DefaultCacheBytes, Layout: DefaultValkeyLayout, Connections: valkey.DefaultConnections},
			Bolt:     BoltConfig{Path: "/var/lib/idemgate/idemgate.db"},
			Postgres: PostgresConfig{Table: postgres.DefaultTable},
		},
		Log: LogConfig{Format: "text", Level: "info", Access: true, Query: true},
		Server: ServerConfig{
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			IdleTimeout:       120 * time.Second,
			ShutdownTimeout:   defaultUpstreamTimeout + ShutdownMargin,
			MaxHeaderBytes:    1 << 20,
			TLS:               ServerTLSConfig{MinVersion: "1.2", ClientAuth: ClientAuthNone},
			MaxWaiters:        DefaultMaxWaiters(),
		},
		Tracing: TracingConfig{Protocol: ProtocolGRPC, SampleRatio: 1, ServiceName: "idemgate"},
		Policy:  p,
	}
}

// Validate checks a built Config, e.g. after flags overrode fields, and
// returns every problem at once: errors.Join of *policy.FieldError, each
// naming the key path (e.g. "upstream.url", "routes[1].wait_timeout").
func (c *Config) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &policy.FieldError{Path: path, Err: fmt.Errorf(format, args...)})
	}
	if err := checkAddr(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	switch u := c.Upstream.URL; {
	case u == nil:
		bad("upstream.url", "is required (an absolute http, https or h2c URL)")
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != policy.SchemeH2C:
		bad("upstream.url", "%s must be an absolute http, https or h2c URL", showURL(u))
	case u.Host == "":
		bad("upstream.url", "%s has no host", showURL(u))
	case u.RawQuery != "" || u.Fragment != "":
		bad("upstream.url", "%s must not carry a query or fragment", showURL(u))
	}
	if c.Upstream.Timeout <= 0 {
		bad("upstream.timeout", "%v must be > 0", c.Upstream.Timeout)
	}
	if err := checkAddr(c.Admin.Listen); err != nil {
		bad("admin.listen", "%v", err)
	} else if c.Admin.Listen == c.Listen && !anyPort(c.Listen) {
		bad("admin.listen", "%q is also the proxy's listen address", c.Admin.Listen)
	}
	switch c.Store.Driver {
	case DriverMemory:
	case DriverValkey:
		if len(c.Store.Valkey.Addrs) == 0 {
			bad("store.valkey.addrs", "must list at least one host:port for driver valkey")
		}
		for i, a := range c.Store.Valkey.Addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad(fmt.Sprintf("store.valkey.addrs[%d]", i), "%q is not host:port", a)
			}
		}
		acks := c.Store.Valkey.Acks
		if acks.Replicas < 0 || acks.Replicas > MaxAckReplicas {
			bad("store.valkey.acks.replicas", "%d must be between 0 (off) and %d", acks.Replicas, MaxAckReplicas)
		}
		if acks.On() && (acks.Timeout < time.Millisecond || acks.Timeout > MaxAckTimeout) {
			bad("store.valkey.acks.timeout", "%v must be between 1ms and %v (the store operation timeout is 2s)", acks.Timeout, MaxAckTimeout)
		}
		if c.Store.Valkey.CacheBytes < 0 {
			bad("store.valkey.cache_bytes", "%d must be >= 0 (0 turns the replay cache off)", c.Store.Valkey.CacheBytes)
		}
		if d := c.Store.Valkey.MaxFlushDelay; d < 0 || d > MaxValkeyMaxFlushDelay {
			bad("store.valkey.max_flush_delay", "%v must be between 0 (off) and %v", d, MaxValkeyMaxFlushDelay)
		}
		if n := c.Store.Valkey.Connections; !valkey.ValidConnections(n) {
			bad("store.valkey.connections", "%d must be a power of two from 1 to %d (connections per Valkey server)", n, valkey.MaxConnections)
		}
		if l := c.Store.Valkey.Layout; l != 3 && l != 4 && l != 5 {
			bad("store.valkey.layout", "%d must be 3, 4 or 5 (4 or 5 only once every instance runs a build that reads it)", l)
		}
	case DriverBolt:
		if c.Store.Bolt.Path == "" {
			bad("store.bolt.path", "is required for driver bolt")
		}
	case DriverPostgres:
		if c.Store.Postgres.DSN == "" {
			bad("store.postgres.dsn", "is required for driver postgres (or set %s)", EnvName("store.postgres.dsn"))
		} else if _, err := postgres.PoolConfig(postgres.Options{DSN: c.Store.Postgres.DSN}); err != nil {
			// Never quote the DSN: it may hold a password.
			bad("store.postgres.dsn", "is neither a libpq URL nor a key=value connection string")
		}
		if err := postgres.ValidateTable(c.Store.Postgres.Table); err != nil {
			bad("store.postgres.table", "%v", err)
		}
		if c.Store.Postgres.MaxConns < 0 || c.Store.Postgres.MaxConns > maxPostgresConns {
			bad("store.postgres.max_conns", "%d must be 0 (default) to %d", c.Store.Postgres.MaxConns, maxPostgresConns)
		}
	default:
		bad("store.driver", "%q must be memory, valkey, bolt or postgres", c.Store.Driver)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		bad("log.format", "%q must be text or json", c.Log.Format)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "%q must be debug, info, warn or error", c.Log.Level)
	}
	for _, d := range []struct {
		path string
		v    time.Duration
	}{
		{"server.read_header_timeout", c.Server.ReadHeaderTimeout},
		{"server.read_timeout", c.Server.ReadTimeout},
		{"server.write_timeout", c.Server.WriteTimeout},
		{"server.idle_timeout", c.Server.IdleTimeout},
		{"server.shutdown_timeout", c.Server.ShutdownTimeout},
	} {
		if d.v < 0 {
			bad(d.path, "%v must be >= 0 (0 means no limit)", d.v)
		}
	}
	if w := c.Server.WriteTimeout; w > 0 && c.Upstream.Timeout > 0 && w <= c.Upstream.Timeout {
		bad("server.write_timeout", "%v must exceed upstream.timeout (%v), or be 0, or responses are cut off", w, c.Upstream.Timeout)
	}
	// Exceeding upstream.timeout is not enough: a call that answers at the
	// end of its timeout still writes its response to the store, bounded by
	// the store timeout and retried (found by adversarial testing:
	// 4.5s against a 4s upstream timeout lost the completion to a 2.5s store
	// pause, and the retry ran again after the lease).
	if s := c.Server.ShutdownTimeout; s > 0 && c.Upstream.Timeout > 0 && s < c.Upstream.Timeout+ShutdownMargin {
		bad("server.shutdown_timeout", "%v must exceed upstream.timeout (%v) by at least %v, or be 0 (no limit): a call in flight at SIGTERM may run for upstream.timeout and must then record its response in the store before the process exits (leave it unset for upstream.timeout + %v)",
			s, c.Upstream.Timeout, ShutdownMargin, ShutdownMargin)
	}
	if c.Server.MaxHeaderBytes <= 0 {
		bad("server.max_header_bytes", "%d must be > 0", c.Server.MaxHeaderBytes)
	}
	if c.Server.MaxWaiters < 0 {
		bad("server.max_waiters", "%d must be >= 0 (0 means no limit)", c.Server.MaxWaiters)
	}
	if c.Server.MaxStoreWaiting < 0 {
		bad("server.max_store_waiting", "%d must be >= 0 (0 means no limit; unset, it follows the store's pool)", c.Server.MaxStoreWaiting)
	}
	errs = append(errs, c.Tracing.validate()...)
	errs = append(errs, c.validateTLS()...)
	if d := c.Problems.DocsURL; d != "" {
		if err := checkHTTPURL(d); err != nil {
			bad("problems.docs_url", "%q %v", d, err)
		}
	}
	if b := c.Problems.TypeBase; b != "" {
		if err := checkHTTPURL(b); err != nil {
			bad("problems.type_base", "%q %v", b, err)
		} else if !strings.HasSuffix(b, "/") && !strings.HasSuffix(b, "#") {
			// The slug is appended as is: ".../problems" + "key-reused"
			// would name another resource.
			bad("problems.type_base", "%q must end in / or #, the slug (e.g. key-reused) is appended to it", b)
		}
	}
	if c.Policy == nil {
		bad("routes", "no compiled policy")
	} else {
		routes := c.Policy.Routes()
		vals := make([]policy.Route, len(routes))
		for i, r := range routes {
			vals[i] = *r
		}
		errs = append(errs, waitTimeoutErrs(vals, c.Upstream.Timeout)...)
	}
	return errors.Join(errs...)
}

// waitTimeoutErrs checks wait_timeout <= upstream.timeout for routes (file
// order, then the defaults route last).
func waitTimeoutErrs(routes []policy.Route, upstream time.Duration) []error {
	if upstream <= 0 {
		return nil
	}
	var errs []error
	for i, r := range routes {
		path := fmt.Sprintf("routes[%d].wait_timeout", i)
		if i == len(routes)-1 {
			path = "defaults.wait_timeout"
		}
		if r.WaitTimeout > upstream {
			errs = append(errs, &policy.FieldError{Path: path, Err: fmt.Errorf(
				"%v must be <= upstream.timeout (%v): a waiting retry cannot outlast the call it waits for", r.WaitTimeout, upstream)})
		}
	}
	return errs
}

// showURL quotes u for an error message, unless it may carry a credential.
func showURL(u *url.URL) string {
	if s := u.Redacted(); !strings.Contains(s, "@") {
		return strconv.Quote(s)
	}
	return "the URL"
}

// validate checks the tracing section whether or not it is enabled, so a
// typo is caught before someone turns tracing on.
func (t *TracingConfig) validate() []error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &policy.FieldError{Path: path, Err: fmt.Errorf(format, args...)})
	}
	if t.Protocol != ProtocolGRPC && t.Protocol != ProtocolHTTPProtobuf {
		bad("tracing.protocol", "%q must be %s or %s", t.Protocol, ProtocolGRPC, ProtocolHTTPProtobuf)
	}
	if e := t.Endpoint; e != "" {
		if strings.Contains(e, "://") {
			u, err := url.Parse(e)
			switch {
			case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
				bad("tracing.endpoint", "%q must be host:port or an http(s) URL", e)
			case u.Host == "":
				bad("tracing.endpoint", "%q has no host", e)
			}
		} else if _, _, err := net.SplitHostPort(e); err != nil {
			bad("tracing.endpoint", "%q must be host:port or an http(s) URL", e)
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) { // also rejects NaN
		bad("tracing.sample_ratio", "%v must be between 0 and 1", t.SampleRatio)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		bad("tracing.service_name", "must not be empty")
	}
	return errs
}

// checkHTTPURL checks that s is an absolute http(s) URL with a host, as a
// URI sent to clients in a problem type or a Link must be.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an absolute http or https URL")
	case u.Host == "":
		return errors.New("has no host")
	case strings.ContainsAny(s, "<> \t\"\n"):
		return errors.New("must not contain spaces, quotes or angle brackets")
	}
	return nil
}

// anyPort reports whether addr, a valid host:port, asks for a port the
// system picks (port 0): two listeners given the same such address each
// get a free port of their own, so they do not clash; the start line logs
// the ports bound.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("is required (host:port)")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	return nil
}
