// Package admin serves idemgate's operator listener: health, readiness, metrics and idempotency record inspection and purge.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/logdigest"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// ReadyTimeout is how long /readyz waits for the store's Ping before it
// reports the store check as failed.
const ReadyTimeout = time.Second

// StoreTimeout bounds each store call of /admin/records. Without it a dead
// store can hold the request for as long as the client waits (the Valkey
// client retries until its context ends); after it the answer is 503.
const StoreTimeout = 3 * time.Second

// Options configures the admin handler. Every field is optional except that
// /readyz reports not ready without Store or Policy, /metrics answers 404
// without Gatherer and /admin/ answers 403 without Token.
type Options struct {
	// Store is pinged by /readyz and read and purged by /admin/records.
	Store store.Store
	// Policy returns the current policy; it is called once per request
	// because the policy can be reloaded. A nil result means no policy is
	// loaded (not ready; /admin/records answers 503).
	Policy func() *policy.Policy
	// Gatherer is exposed on /metrics through promhttp.HandlerFor; the
	// process-global registry is never used implicitly.
	Gatherer prometheus.Gatherer
	// Token is the bearer token (RFC 6750 section 2.1) every /admin/ request
	// must present. "" disables /admin/: every request there answers 403.
	Token string
	// Logger receives purge audit lines and check failures; nil discards.
	Logger *slog.Logger
	// Now is the clock used to time the readiness checks; nil means
	// time.Now.
	Now func() time.Time
	// V1Lookup makes /admin/records also read and purge the record a
	// build before layout 2 kept for the same operation (under the route's
	// name; docs/protocol.md, "Layout versions"), as the proxy's
	// store.v1_lookup does. Only a record of layout 1 (store.Record.Layout1)
	// is taken there: a route name can be another route's scope, and that
	// route's record is not this one's. false (store.v1_lookup: false)
	// looks under the request's own identity only.
	V1Lookup bool
	// Scoping is how the host a request was sent to joins the scope of
	// its record (upstream.pass_host), given as the proxy's is, so that
	// /admin/records derives the identity the proxy stored the record
	// under (identity.Scoping.Identity).
	Scoping identity.Scoping
	// ProxyHTTPS says the proxy listener serves TLS (server.tls): the
	// default port that a host= given with a port may carry is 443, else
	// 80 (identity.OriginHost).
	ProxyHTTPS bool
	// Draining reports whether the process is shutting down; while it
	// returns true, /readyz answers 503 not-ready ("shutting down") before
	// any other check, so that load balancers stop sending requests while
	// the proxy drains. /healthz is unaffected. nil means never draining.
	Draining func() bool
	// StoreChecked, when set, is told the outcome of every store Ping
	// /readyz makes (err nil: it answered) and when that Ping started, at
	// the moment the answer is decided, so a gauge of the store's state
	// (idemgate_store_up) changes together with /readyz, never after it.
	StoreChecked func(start time.Time, err error)
	// KeySets reports the JWK Sets of owner: jwt routes that hold no keys
	// yet (identity.KeyRing.Unready): while it returns an error, those routes
	// refuse every token, so /readyz answers 503 with the error's text
	// (naming the routes and key sets). nil means no such check.
	KeySets func() error
}

type handler struct {
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	token [sha256.Size]byte // SHA-256 of Options.Token, compared in constant time
	mux   *http.ServeMux
}

// New returns the admin listener's handler:
//
//   - GET /healthz: 200 "ok" while the process serves; touches nothing.
//   - GET /readyz: 200 "ready" when a policy is loaded, every JWK Set of
//     its owner: jwt routes holds keys (Options.KeySets), the store answers
//     Ping within ReadyTimeout and the process is not draining (see
//     Options.Draining), else 503 with a problem naming the failing check.
//     Never cached.
//   - GET /metrics: the Gatherer in the Prometheus exposition formats.
//   - GET /admin/routes: every route's effective policy, as validate prints
//     it (application/yaml), or as JSON ({"routes": [...]}, the same keys
//     and values) when Accept prefers application/json.
//   - GET|DELETE /admin/records?route=NAME&owner=OWNER&key=KEY[&host=HOST]:
//     inspect or purge one idempotency record; host is the Host the client
//     sent, required on a route whose records are kept per host
//     (upstream.pass_host, Options.Scoping; 400 without it) and ignored on
//     the others; owner is the stored form, or give
//     owner_value=RAW for the route's source to derive it
//     (policy.Route.OwnerFromValue); a 404 for an owner not of the route's
//     stored form names the form it needs; authorization=RAW may replace owner for
//     routes whose owner is the Authorization header (a credential in a URL
//     may reach access logs on the way; prefer owner=sha256:HEX, see
//     identity.AuthorizationOwner). DELETE answers 204, 404
//     when absent, and 409 for a record still running within its lease
//     unless force=true is given (completed and abandoned records purge
//     freely).
//
// Every error is an RFC 9457 application/problem+json document of a kind in
// problem.Catalog, whose type, status and title are the same wherever
// idemgate answers with it.
func New(opts Options) http.Handler {
	h := &handler{opts: opts, log: opts.Logger, now: opts.Now}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.token = sha256.Sum256([]byte(opts.Token))
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("/healthz", methods(h.healthz, http.MethodGet, http.MethodHead))
	h.mux.HandleFunc("/readyz", methods(h.readyz, http.MethodGet, http.MethodHead))
	h.mux.Handle("/metrics", h.metrics())
	h.mux.HandleFunc("/admin/", h.authorized(notFound))
	h.mux.HandleFunc("/admin/records", h.authorized(methods(h.records, http.MethodGet, http.MethodHead, http.MethodDelete)))
	h.mux.HandleFunc("/admin/routes", h.authorized(methods(h.routes, http.MethodGet, http.MethodHead)))
	h.mux.HandleFunc("/", notFound)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// methods answers 405 with Allow (RFC 9110 section 15.5.6) for any method
// not listed.
func methods(next http.HandlerFunc, allowed ...string) http.HandlerFunc {
	allow := strings.Join(allowed, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		for _, m := range allowed {
			if r.Method == m {
				next(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		problem.Write(w, problem.MethodNotAllowed.With(
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)))
	}
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok"))
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.opts.Draining != nil && h.opts.Draining() {
		problem.Write(w, problem.NotReady.With("shutting down: requests in flight are finishing, new ones go elsewhere"))
		return
	}
	if h.opts.Policy == nil || h.opts.Policy() == nil {
		problem.Write(w, problem.NotReady.With("policy check failed: no policy loaded"))
		return
	}
	if h.opts.KeySets != nil {
		if err := h.opts.KeySets(); err != nil {
			problem.Write(w, problem.NotReady.With("jwt key check failed: "+strings.ReplaceAll(err.Error(), "\n", "; ")))
			return
		}
	}
	if h.opts.Store == nil {
		problem.Write(w, problem.NotReady.With("store check failed: no store configured"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	start := h.now()
	err := h.opts.Store.Ping(ctx)
	if h.opts.StoreChecked != nil {
		h.opts.StoreChecked(start, err)
	}
	if err != nil {
		took := h.now().Sub(start)
		h.log.Warn("readiness store check failed", "err", err, "took_ms", took.Milliseconds())
		problem.Write(w, problem.NotReady.With(
			fmt.Sprintf("store check failed after %d ms: %v", took.Milliseconds(), err)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ready"))
}

func (h *handler) metrics() http.Handler {
	if h.opts.Gatherer == nil {
		return methods(func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, problem.MetricsNotConfigured.With(
				"no metrics gatherer is configured"))
		}, http.MethodGet, http.MethodHead)
	}
	ph := promhttp.HandlerFor(h.opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return methods(ph.ServeHTTP, http.MethodGet, http.MethodHead)
}

// authorized guards /admin/ with the bearer token. Authentication runs before
// method and path checks so that an unauthenticated caller learns nothing
// about the endpoints.
func (h *handler) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if h.opts.Token == "" {
			problem.Write(w, problem.AdminDisabled.With(
				"the admin token is not configured, so the admin API is disabled"))
			return
		}
		presented, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemgate-admin"`)
			problem.Write(w, problem.AdminUnauthorized.With(
				"the admin API requires Authorization: Bearer <token>"))
			return
		}
		// Hashing first makes the comparison constant time in the length
		// of the presented token too.
		sum := sha256.Sum256([]byte(presented))
		if subtle.ConstantTimeCompare(sum[:], h.token[:]) != 1 {
			// RFC 6750 section 3.1.
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemgate-admin", error="invalid_token"`)
			problem.Write(w, problem.AdminUnauthorized.With(
				"the admin bearer token is not valid"))
			return
		}
		next(w, r)
	}
}

// bearer extracts the token of an RFC 6750 section 2.1 credential; the
// scheme is case-insensitive (RFC 9110 section 11.1).
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", false
	}
	return token, true
}

// notFound answers a path no endpoint serves; under /admin/ only once the
// caller is authorized, so the paths stay hidden from others.
func notFound(w http.ResponseWriter, r *http.Request) {
	problem.Write(w, problem.NotFound.With(fmt.Sprintf("no admin endpoint at %q", r.URL.Path)))
}

// recordView is the JSON shape of GET /admin/records. Absent parts are
// omitted rather than sent as zero values so an operator can tell "no
// response yet" from "status 0".
type recordView struct {
	Scope               string  `json:"scope"`
	Owner               string  `json:"owner"`
	Key                 string  `json:"key"`
	State               string  `json:"state"`
	Fingerprint         string  `json:"fingerprint"`
	Status              *int    `json:"status,omitempty"`
	ResponseHeaderBytes *int    `json:"response_header_bytes,omitempty"`
	ResponseBodyBytes   *int    `json:"response_body_bytes,omitempty"`
	Omitted             *bool   `json:"omitted,omitempty"`
	CreatedAt           *string `json:"created_at,omitempty"`
	LeaseEnd            *string `json:"lease_end,omitempty"`
	RetentionEnd        *string `json:"retention_end,omitempty"`
	StoredAt            *string `json:"stored_at,omitempty"`
	// AgeSeconds is how long ago the record was (last) claimed, at
	// millisecond precision: for an abandoned record, how long ago the
	// call whose outcome is unknown started (docs/operations.md,
	// IdemgateOutcomeUnknown, says when to purge it and when to wait).
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
}

// rfc3339Milli is RFC 3339 with exactly millisecond precision, the store's
// resolution.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

func timeField(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(rfc3339Milli)
	return &s
}

// headerBytes is the size of h in HTTP/1.1 field-line form ("Name: value\r\n"
// per value), the closest measure to what a replay puts on the wire.
func headerBytes(h http.Header) int {
	n := 0
	for name, values := range h {
		for _, v := range values {
			n += len(name) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

func viewOf(rec *store.Record, now time.Time) recordView {
	v := recordView{
		Scope:        rec.Identity.Scope,
		Owner:        rec.Identity.Owner,
		Key:          rec.Identity.Key,
		State:        rec.State.String(),
		Fingerprint:  rec.Fingerprint,
		CreatedAt:    timeField(rec.CreatedAt),
		LeaseEnd:     timeField(rec.LeaseEnd),
		RetentionEnd: timeField(rec.RetentionEnd),
	}
	if !rec.CreatedAt.IsZero() {
		age := float64(max(now.Sub(rec.CreatedAt), 0).Milliseconds()) / 1000
		v.AgeSeconds = &age
	}
	if resp := rec.Response; resp != nil {
		status, hb, bb, omitted := resp.Status, headerBytes(resp.Header), len(resp.Body), resp.Omitted
		v.Status, v.ResponseHeaderBytes, v.ResponseBodyBytes, v.Omitted = &status, &hb, &bb, &omitted
		v.StoredAt = timeField(resp.StoredAt)
	}
	return v
}

// identity resolves the query of /admin/records to a store identity, or
// writes the problem and returns false.
func (h *handler) identity(w http.ResponseWriter, r *http.Request) (store.Identity, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// URL.Query would drop the malformed pair and report it missing.
		problem.Write(w, problem.AdminBadRequest.With("malformed query string: "+err.Error()))
		return store.Identity{}, false
	}
	routeName, key := q.Get("route"), q.Get("key")
	var missing []string
	if routeName == "" {
		missing = append(missing, "route")
	}
	if key == "" {
		missing = append(missing, "key")
	}
	// owner may legitimately be "" (routes with owner: none), so presence,
	// not emptiness, is what counts.
	hasOwner, hasAuth, hasValue := q.Has("owner"), q.Has("authorization"), q.Has("owner_value")
	given := 0
	for _, h := range []bool{hasOwner, hasAuth, hasValue} {
		if h {
			given++
		}
	}
	if given == 0 {
		missing = append(missing, "owner (or owner_value, or authorization)")
	}
	if len(missing) > 0 {
		problem.Write(w, problem.AdminBadRequest.With(
			"missing query parameter: "+strings.Join(missing, ", ")))
		return store.Identity{}, false
	}
	if given > 1 {
		problem.Write(w, problem.AdminBadRequest.With(
			"give one of owner, owner_value and authorization"))
		return store.Identity{}, false
	}
	if h.opts.Policy == nil {
		problem.Write(w, problem.PolicyNotLoaded.With("no policy is loaded"))
		return store.Identity{}, false
	}
	p := h.opts.Policy()
	if p == nil {
		problem.Write(w, problem.PolicyNotLoaded.With("no policy is loaded"))
		return store.Identity{}, false
	}
	var route *policy.Route
	for _, rt := range p.Routes() {
		if rt.Name == routeName {
			route = rt
			break
		}
	}
	if route == nil {
		problem.Write(w, problem.AdminUnknownRoute.With(
			fmt.Sprintf("no route named %q in the current policy", routeName)))
		return store.Identity{}, false
	}
	owner := q.Get("owner")
	switch {
	case hasValue:
		derived, err := route.OwnerFromValue(q.Get("owner_value"))
		if err != nil {
			problem.Write(w, problem.AdminBadRequest.With(fmt.Sprintf("route %q takes its owner from %s: %v", route.Name, route.Owner, err)))
			return store.Identity{}, false
		}
		owner = derived
	}
	if hasAuth {
		if route.Owner.Kind != identity.OwnerAuthorization {
			problem.Write(w, problem.AdminBadRequest.With(
				fmt.Sprintf("route %q takes its owner from %q, not the Authorization header; give owner instead", route.Name, route.Owner.Kind)))
			return store.Identity{}, false
		}
		raw := q.Get("authorization")
		if strings.Trim(raw, " \t") == "" {
			// policy never derives an owner from an empty Authorization field.
			problem.Write(w, problem.AdminBadRequest.With("authorization is empty"))
			return store.Identity{}, false
		}
		// The one derivation the proxy uses, so the operator's hash always
		// matches the stored owner.
		owner = identity.AuthorizationOwner(raw)
	}
	if owner == policy.OwnerRecordOwner {
		// The owner record of the route's scope (policy.OwnerRecord) is
		// one for every host, so it is never looked up under one.
		return store.Identity{Owner: owner, Scope: route.Scope, Key: key}, true
	}
	at := identity.Origin{Host: q.Get("host"), HTTPS: h.opts.ProxyHTTPS}
	if h.opts.Scoping.HostScoped(route) {
		if at.Host == "" {
			problem.Write(w, problem.AdminBadRequest.With(fmt.Sprintf(
				"missing query parameter: host: route %q keeps a record per host (upstream.pass_host: true, scope %q@HOST), so give host, the Host field the client sent (idemgate admin --host)",
				route.Name, route.Scope)))
			return store.Identity{}, false
		}
		if strings.ContainsAny(at.Host, "/ \t@") {
			problem.Write(w, problem.AdminBadRequest.With(fmt.Sprintf(
				"host %q is not a Host field value: give the host and any port only, as in host=t1.example or host=t1.example:8443", at.Host)))
			return store.Identity{}, false
		}
	}
	// The one derivation the proxy uses (identity.Scoping), so the record
	// found is the one the proxy stored.
	return h.opts.Scoping.Identity(route, owner, key, at), true
}

// routes answers GET /admin/routes: the effective policy of every route in
// force, as idemgate validate prints it (policy.Policy.Describe), so an
// operator sees the route names, scopes and owner sources the record
// lookups need.
func (h *handler) routes(w http.ResponseWriter, r *http.Request) {
	var p *policy.Policy
	if h.opts.Policy != nil {
		p = h.opts.Policy()
	}
	if p == nil {
		problem.Write(w, problem.PolicyNotLoaded.With("no policy is loaded"))
		return
	}
	var buf strings.Builder
	if err := p.Describe(&buf); err != nil {
		problem.Write(w, problem.AdminInternal.With("the policy could not be described"))
		return
	}
	w.Header().Set("Vary", "Accept")
	if !wantsJSON(r.Header.Values("Accept")) {
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		_, _ = io.WriteString(w, buf.String())
		return
	}
	// The JSON form is the YAML one read back: the same list, keys and
	// values, so the two can never disagree (comments are dropped).
	var routes []map[string]any
	if err := yaml.Unmarshal([]byte(buf.String()), &routes); err != nil {
		h.log.Error("admin routes: the policy description is not YAML", "err", err)
		problem.Write(w, problem.AdminInternal.With("the policy could not be described"))
		return
	}
	body, err := json.Marshal(map[string]any{"routes": routes})
	if err != nil {
		h.log.Error("admin routes: encoding JSON", "err", err)
		problem.Write(w, problem.AdminInternal.With("the policy could not be described"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
}

// wantsJSON reports whether an Accept field (RFC 9110 section 12.5.1)
// prefers application/json to application/yaml: JSON only when it is
// acceptable with a higher weight than YAML; YAML, the default, wins a tie
// (*/*, no Accept). Specific ranges take precedence over wildcards.
func wantsJSON(accept []string) bool {
	jsonQ, yamlQ := -1.0, -1.0 // -1: not matched by any range
	jsonSpec, yamlSpec := 0, 0 // specificity of the range that set each: 0 none, 1 */*, 2 type/*, 3 exact
	for _, field := range accept {
		for _, part := range strings.Split(field, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
			set := func(name string, qv *float64, spec *int) {
				sp := 0
				switch mt {
				case name:
					sp = 3
				case "application/*":
					sp = 2
				case "*/*":
					sp = 1
				}
				if sp > *spec {
					*qv, *spec = q, sp
				}
			}
			set("application/json", &jsonQ, &jsonSpec)
			set("application/yaml", &yamlQ, &yamlSpec)
		}
	}
	return jsonQ > 0 && jsonQ > yamlQ
}

// v1Identity is where a build before layout 2 kept the record of id for
// route (identity.Layout1, as the proxy's v1_lookup reads it), or
// false when that is id itself or layout 1 lookups are off.
func (h *handler) v1Identity(id store.Identity, routeName string) (store.Identity, bool) {
	if !h.opts.V1Lookup {
		return id, false
	}
	return identity.Layout1(id, routeName)
}

// getV1 reads the layout 1 record at old: nil when there is none or the
// record there is of a later layout (another scope's record).
func (h *handler) getV1(ctx context.Context, old store.Identity) (*store.Record, error) {
	rec, err := h.opts.Store.Get(ctx, old)
	if err != nil || !rec.Layout1() {
		return nil, err
	}
	return rec, nil
}

func (h *handler) records(w http.ResponseWriter, r *http.Request) {
	if h.opts.Store == nil {
		problem.Write(w, problem.StoreUnavailable.With("no store is configured"))
		return
	}
	id, ok := h.identity(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), StoreTimeout)
	defer cancel()
	if r.Method == http.MethodDelete {
		h.purge(ctx, w, r, id)
		return
	}
	rec, err := h.opts.Store.Get(ctx, id)
	if err == nil && rec == nil {
		// Records written before layout 2 sit under the route's name.
		if old, ok := h.v1Identity(id, r.URL.Query().Get("route")); ok {
			rec, err = h.getV1(ctx, old)
		}
	}
	if err != nil {
		h.storeError(w, "get", id, err)
		return
	}
	if rec == nil {
		h.recordNotFound(w, r, id)
		return
	}
	body, err := json.Marshal(viewOf(rec, h.now()))
	if err != nil {
		h.log.Error("admin record encoding failed", "scope", id.Scope, "err", err)
		problem.Write(w, problem.AdminInternal.With("the record could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
}

func (h *handler) purge(ctx context.Context, w http.ResponseWriter, r *http.Request, id store.Identity) {
	force := r.URL.Query().Get("force") == "true"
	state := store.Absent
	ids := []store.Identity{id}
	if old, ok := h.v1Identity(id, r.URL.Query().Get("route")); ok {
		// A layout 1 record of the same operation would otherwise answer
		// the next retry (proxy v1_lookup) after the purge. Only a record
		// of layout 1 is purged there: under a scope equal to the route's
		// name a current record belongs to another operation.
		rec, err := h.getV1(ctx, old)
		if err != nil {
			h.storeError(w, "get", old, err)
			return
		}
		if rec != nil {
			ids = append(ids, old)
			state = rec.State
		}
	}
	if !force {
		// The layout 1 record's state is already known (getV1); only the
		// record of the request's own identity is left to read.
		rec, err := h.opts.Store.Get(ctx, id)
		if err != nil {
			h.storeError(w, "get", id, err)
			return
		}
		if rec != nil && state != store.Running {
			state = rec.State
		}
		if state == store.Running {
			// Purging a record whose holder is alive lets the next retry
			// reach the backend while the first request is still there:
			// the one thing idemgate exists to prevent. It takes force.
			// Get then Delete is not atomic: a record seen completed or
			// abandoned can be re-claimed in between; the store has no
			// conditional delete to close that window.
			h.log.Warn("admin purge refused: record running", "route", r.URL.Query().Get("route"), "scope", id.Scope,
				"owner_hash", logdigest.Of(id.Owner), "key_hash", logdigest.OfIdentity(id.Owner, id.Scope, id.Key), "remote", r.RemoteAddr)
			problem.Write(w, problem.AdminRecordRunning.With(
				"the record is held by a request within its lease; purging it lets a retry reach the backend while that request runs. Wait for the lease end, or repeat with force=true"))
			return
		}
	}
	existed := false
	for _, id := range ids {
		ok, err := h.opts.Store.Delete(ctx, id)
		if err != nil {
			h.storeError(w, "delete", id, err)
			return
		}
		existed = existed || ok
	}
	// Audit line: the raw key and owner may be secrets or personal data, so
	// only short digests identify the record.
	h.log.Info("admin purge", "route", r.URL.Query().Get("route"), "scope", id.Scope, "owner_hash", logdigest.Of(id.Owner),
		"key_hash", logdigest.OfIdentity(id.Owner, id.Scope, id.Key), "existed", existed, "state", state.String(), "force", force, "remote", r.RemoteAddr)
	if !existed {
		h.recordNotFound(w, r, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// storeError fails closed: a store failure is reported as such, never as an
// absent record.
func (h *handler) storeError(w http.ResponseWriter, op string, id store.Identity, err error) {
	h.log.Error("admin store operation failed", "op", op, "scope", id.Scope, "key_hash", logdigest.OfIdentity(id.Owner, id.Scope, id.Key), "err", err)
	if errors.Is(err, store.ErrUnavailable) {
		problem.Write(w, problem.StoreUnavailable.With(
			"the idempotency store could not be reached"))
		return
	}
	problem.Write(w, problem.AdminInternal.With("the store operation failed"))
}
