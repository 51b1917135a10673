package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
)

// publishedFormat names the JSON document of `idemgate policy --format
// json`; a change that is not an addition gets a new name.
const publishedFormat = "idemgate-policy/1"

// publishedPolicy is the document `idemgate policy` prints: what a client
// of each enforced route must know (IETF Idempotency-Key draft, section
// 2.5.2: the resource publishes its idempotency specification). docs/configuration.md,
// "Publishing the policy", documents every field; fields are only ever
// added.
type publishedPolicy struct {
	Format string           `json:"format"`
	Routes []publishedRoute `json:"routes"`
}

type publishedRoute struct {
	Name        string               `json:"name"`
	Host        string               `json:"host,omitempty"`
	Path        string               `json:"path"` // ServeMux path pattern; "" for the defaults route (every other path)
	Methods     []string             `json:"methods"`
	Key         publishedKey         `json:"key"`
	Fingerprint publishedFingerprint `json:"fingerprint"`
	// RetentionSeconds is how long a completed response is replayed; 0
	// means forever.
	RetentionSeconds int64         `json:"retention_seconds"`
	Concurrent       publishedConc `json:"concurrent"`
	ReusedKey        string        `json:"reused_key"`
	ReplayStatuses   []string      `json:"replay_statuses"`
	// UnknownStatuses are the statuses passed on with the claim kept
	// (unknown_statuses): a retry is refused until the lease ends, then
	// on_abandoned decides. Omitted when none.
	UnknownStatuses []string         `json:"unknown_statuses,omitempty"`
	MaxRequestBytes int64            `json:"max_request_bytes"`
	Problems        []publishedIssue `json:"problems"`
	// AdvertiseExpiry says that first answers and replays carry
	// Idempotency-Key-Expires (advertise_expiry).
	AdvertiseExpiry bool `json:"advertise_expiry"`
	// ReplayGRPCCodes are the grpc-status codes stored for a gRPC call
	// (replay_grpc_codes, by name); other codes are not stored.
	ReplayGRPCCodes []string `json:"replay_grpc_codes"`
	// GRPCMethod is the gRPC method the route's path names,
	// "orders.v1.Orders/Create" ("orders.v1.Orders/*" for every method of
	// a service), when it names one; a client sends the key as
	// idempotency-key metadata.
	GRPCMethod string `json:"grpc_method,omitempty"`
}

type publishedKey struct {
	From      string `json:"from"`              // header or body
	Header    string `json:"header,omitempty"`  // from header
	Pointer   string `json:"pointer,omitempty"` // from body
	Required  bool   `json:"required"`
	MaxLength int    `json:"max_length"`
	Syntax    string `json:"syntax"`
	Scope     string `json:"scope"` // who shares a key space: the owner source
}

type publishedFingerprint struct {
	Method  bool     `json:"method"`
	Path    bool     `json:"path"`
	Query   bool     `json:"query"`
	Headers []string `json:"headers"`
	Body    string   `json:"body"`
	Exclude []string `json:"exclude"`
}

type publishedConc struct {
	Behaviour          string `json:"behaviour"` // wait or conflict
	WaitTimeoutSeconds int64  `json:"wait_timeout_seconds,omitempty"`
	Status             int    `json:"status"`
}

type publishedIssue struct {
	Slug   string `json:"-"` // the catalog's name, under any type base
	Type   string `json:"type"`
	Status int    `json:"status"`
	Title  string `json:"title"`
	Action string `json:"action"`
}

func policyCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file whose policy to publish")
	format := fs.String("format", "markdown", "markdown, json or openapi")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "idemgate policy: --config FILE is required")
		return 2
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "idemgate policy: %s is invalid:\n", *path)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  - %s\n", line)
		}
		return 1
	}
	doc := publish(cfg.Policy, cfg.Problems.TypeBase)
	switch *format {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(doc)
	case "markdown":
		err = writeMarkdown(stdout, doc)
	case "openapi":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(openAPI(doc))
	default:
		fmt.Fprintf(stderr, "idemgate policy: --format %q must be markdown, json or openapi\n", *format)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemgate policy: %v\n", err)
		return 1
	}
	return 0
}

// keySyntax is the published syntax of a key sent in a header. The
// characters a bare key may not hold are in code spans: bare, the comma
// and the double quote read as the sentence's own ("except \", , and ;").
const keySyntax = "an RFC 8941 sf-string (`\"order-123\"`: 1-255 printable ASCII characters, spaces allowed, not all spaces) or a bare key (`order-123`: 1-255 characters from `!` to `~` except `\"`, `,` and `;`), sent once; both forms of the same characters are the same key"

// mayCarryGRPC reports whether r can receive a gRPC call, a POST to
// /package.Service/Method: a route that names a gRPC method or service,
// or one that covers every path (the defaults route, a pattern "/"). A
// route on any other path (POST /v1/orders) never sees one, so its
// published description leaves gRPC out.
func mayCarryGRPC(r publishedRoute) bool {
	return slices.Contains(r.Methods, http.MethodPost) && (r.GRPCMethod != "" || r.Path == "" || r.Path == "/")
}

// publish describes every enforced route of p, in Routes order (the
// defaults route last, standing for every path no route matches).
func publish(p *policy.Policy, typeBase string) publishedPolicy {
	doc := publishedPolicy{Format: publishedFormat, Routes: []publishedRoute{}}
	for _, r := range p.Routes() {
		if r.Mode != policy.ModeEnforce {
			continue
		}
		pr := publishedRoute{
			Name:    r.Name,
			Methods: slices.Clone(r.Methods),
			// HeaderName: the spelling the operator wrote, not the
			// canonical form (X-GitHub-Delivery, not X-Github-Delivery).
			Key: publishedKey{From: string(identity.KeyFromHeader), Header: cmp.Or(r.HeaderName, r.Header), Required: r.Required, MaxLength: identity.MaxKeyLength,
				Syntax: keySyntax,
				Scope:  ownerScope(r)},
			Fingerprint: publishedFingerprint{Method: true, Path: true, Query: r.Fingerprint.Query,
				Headers: append([]string{}, r.Fingerprint.Headers...), Body: string(r.Fingerprint.Body),
				Exclude: append([]string{}, r.Fingerprint.Exclude...)},
			RetentionSeconds: int64(r.Retention.Seconds()),
			Concurrent:       publishedConc{Behaviour: string(r.Concurrent), Status: problem.InProgress.Status},
			ReusedKey:        "a key reused for a request with another fingerprint gets " + strconv.Itoa(problem.KeyReused.Status) + " " + problem.KeyReused.Slug + "; the same request gets the stored response again, with Idempotent-Replayed: true",
			MaxRequestBytes:  r.MaxRequestBytes,
			AdvertiseExpiry:  r.AdvertiseExpiry,
		}
		if r.Key.FromBody() {
			pr.Key.From, pr.Key.Header, pr.Key.Pointer = string(identity.KeyFromBody), "", r.Key.Pointer
			pr.Key.Syntax = "a string of 1-255 printable ASCII characters (not all spaces) or an integer, at the JSON pointer in the JSON body"
		}
		if r.Match != "" {
			method, host, path := splitPattern(r.Match)
			pr.Host, pr.Path = host, path
			pr.GRPCMethod = policy.GRPCMethodOf(path)
			_ = method // already narrowed into Methods by policy.New
		}
		if r.Concurrent == policy.ConcurrentWait {
			pr.Concurrent.WaitTimeoutSeconds = int64(r.WaitTimeout.Seconds())
		}
		for _, s := range r.ReplayStatuses {
			pr.ReplayStatuses = append(pr.ReplayStatuses, s.String())
		}
		for _, s := range r.UnknownStatuses {
			pr.UnknownStatuses = append(pr.UnknownStatuses, s.String())
		}
		pr.ReplayGRPCCodes = r.GRPCCodeNames()
		for _, k := range problem.Catalog() {
			if applies(r, k) {
				pr.Problems = append(pr.Problems, publishedIssue{Slug: k.Slug, Type: typeURI(k, typeBase), Status: k.Status, Title: k.Title, Action: k.Advice()})
			}
		}
		doc.Routes = append(doc.Routes, pr)
	}
	return doc
}

// ownerScope says, for clients, whose keys share one key space.
func ownerScope(r *policy.Route) string {
	switch r.Owner.Kind {
	case identity.OwnerNone:
		return "global: one key space for every client of scope " + strconv.Quote(r.Scope)
	case identity.OwnerAuthorization:
		return "per Authorization field value (a refreshed token is a new owner)"
	case identity.OwnerJWT:
		return "per verified bearer token subject (claims " + strings.Join(r.JWT.Claims, ", ") + ")"
	case identity.OwnerClientCert:
		return "per TLS client certificate"
	case identity.OwnerList:
		return "per combination of " + r.Owner.String()
	}
	return "per authenticated client (" + r.Owner.String() + ")"
}

// applies reports whether a client of r can get a problem of kind k.
func applies(r *policy.Route, k problem.Kind) bool {
	switch k {
	case problem.MissingKey:
		return r.Required
	case problem.MissingOwner:
		return r.Owner.Kind != identity.OwnerNone && r.Owner.Kind != identity.OwnerJWT
	case problem.InvalidCredentials:
		return r.Owner.Uses(identity.OwnerJWT)
	case problem.OutcomeUnknown:
		return r.OnAbandoned == policy.AbandonedReject
	case problem.StoreUnavailable:
		return r.OnStoreError == policy.FailClosed
	case problem.ResourceDeleted:
		return r.ResourceFrom != ""
	case problem.HTTP2Preface, problem.AsteriskTarget:
		// Answers to a request that names no path (method PRI, target
		// *), which no route's operation is.
		return false
	}
	return k.Outcome != "" // the admin listener's kinds never reach an API client
}

var patternRE = regexp.MustCompile(`^(?:([A-Z]+)[ \t]+)?([^/]*)(/.*)$`)

// splitPattern splits a ServeMux pattern "[METHOD ][HOST]/PATH".
func splitPattern(p string) (method, host, path string) {
	m := patternRE.FindStringSubmatch(p)
	if m == nil {
		return "", "", p
	}
	return m[1], m[2], m[3]
}

func writeMarkdown(w io.Writer, doc publishedPolicy) error {
	var b strings.Builder
	b.WriteString("# Idempotency\n\n")
	b.WriteString("Unsafe requests to the operations below can be retried safely: send an idempotency key, and a retry of the same request with the same key is answered with the original response (marked `Idempotent-Replayed: true`) instead of being performed again. This follows the IETF draft [The Idempotency-Key HTTP Header Field](https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/). Errors are RFC 9457 problem details (`application/problem+json`).\n")
	for _, r := range doc.Routes {
		title := "`" + strings.Join(r.Methods, "`, `") + "` "
		if r.Path == "" {
			title += "on any other path"
		} else {
			title += "`" + r.Host + r.Path + "`"
		}
		if r.GRPCMethod != "" {
			title += " (gRPC `" + r.GRPCMethod + "`)"
		}
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		if r.Key.From == string(identity.KeyFromBody) {
			fmt.Fprintf(&b, "- **Key**: the JSON body member `%s`: %s.", r.Key.Pointer, r.Key.Syntax)
		} else {
			fmt.Fprintf(&b, "- **Key**: the `%s` header: %s.", r.Key.Header, r.Key.Syntax)
		}
		if r.Key.Required {
			b.WriteString(" **Required**: a request without a key is refused.\n")
		} else {
			b.WriteString(" Optional: a request without a key is performed without protection.\n")
		}
		fmt.Fprintf(&b, "- **Key space**: %s.\n", r.Key.Scope)
		fp := "the method, the path"
		if r.Fingerprint.Query {
			fp += ", the query string"
		}
		if len(r.Fingerprint.Headers) > 0 {
			fp += ", the headers `" + strings.Join(r.Fingerprint.Headers, "`, `") + "`"
		}
		switch r.Fingerprint.Body {
		case "raw":
			fp += " and the body byte for byte"
		case "json":
			fp += " and the JSON body (member order and whitespace do not matter)"
		case "protobuf":
			fp += " and the protobuf message (the order of map entries and of fields does not matter)"
		case "ignore":
			fp += "; not the body"
		}
		if len(r.Fingerprint.Exclude) > 0 {
			fp += ", except the members `" + strings.Join(r.Fingerprint.Exclude, "`, `") + "`, which may change between retries"
		}
		fmt.Fprintf(&b, "- **Same request**: a retry must repeat %s.\n", fp)
		if r.RetentionSeconds == 0 {
			b.WriteString("- **Retention**: completed responses are replayed for as long as the key is kept (no expiry).\n")
		} else {
			fmt.Fprintf(&b, "- **Retention**: a completed response is replayed for %s after it was stored; after that the key is forgotten and a retry is performed again.\n", humanSeconds(r.RetentionSeconds))
		}
		if len(r.UnknownStatuses) > 0 {
			// On a takeover route (no outcome-unknown problem) the retry
			// is refused only while the first attempt's lease lasts.
			after := "a retry is refused with `409`, as for any request whose outcome is unknown"
			if !slices.ContainsFunc(r.Problems, func(p publishedIssue) bool { return p.Slug == problem.OutcomeUnknown.Slug }) {
				after = "a retry is refused with `409` while the first attempt's lease lasts, then performed again, so the operation may run twice"
			}
			fmt.Fprintf(&b, "- **Replayed statuses**: %s. **Outcome unknown**: %s, which say nothing of whether the request took effect: %s. Any other answer is not stored, and a retry is performed again.\n", strings.Join(r.ReplayStatuses, ", "), strings.Join(r.UnknownStatuses, ", "), after)
		} else {
			fmt.Fprintf(&b, "- **Replayed statuses**: %s; any other answer is not stored, and a retry is performed again.\n", strings.Join(r.ReplayStatuses, ", "))
		}
		if mayCarryGRPC(r) {
			fmt.Fprintf(&b, "- **gRPC calls** (`Content-Type: application/grpc`): stored by `grpc-status`, for %s; `CANCELLED` and `DEADLINE_EXCEEDED` leave the outcome unknown, any other code is not stored and a retry is performed again.\n", strings.Join(r.ReplayGRPCCodes, ", "))
		}
		if r.Concurrent.Behaviour == string(policy.ConcurrentWait) {
			fmt.Fprintf(&b, "- **Concurrent retries**: a retry sent while the first request still runs waits up to %s for its response, then gets `%d request-in-progress` with `Retry-After`.\n", humanSeconds(r.Concurrent.WaitTimeoutSeconds), r.Concurrent.Status)
		} else {
			fmt.Fprintf(&b, "- **Concurrent retries**: a retry sent while the first request still runs gets `%d request-in-progress` at once, with `Retry-After`.\n", r.Concurrent.Status)
		}
		fmt.Fprintf(&b, "- **Reused keys**: %s.\n", r.ReusedKey)
		if r.AdvertiseExpiry {
			b.WriteString("- **Expiry**: first answers and replays carry `Idempotency-Key-Expires`, the HTTP-date until which a retry is answered from the record.\n")
		}
		fmt.Fprintf(&b, "- **Body size**: at most %d bytes.\n\n", r.MaxRequestBytes)
		b.WriteString("| problem type | status | what to do |\n|---|---|---|\n")
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "| [`%s`](%s) | %d | %s |\n", p.Slug, p.Type, p.Status, p.Action)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func humanSeconds(s int64) string {
	switch {
	case s%86400 == 0:
		return plural(s/86400, "day")
	case s%3600 == 0:
		return plural(s/3600, "hour")
	case s%60 == 0:
		return plural(s/60, "minute")
	}
	return plural(s, "second")
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

var pathParamRE = regexp.MustCompile(`\{([^}.$]+)(\.\.\.)?\}|\{\$\}`)

// openAPI returns an OpenAPI 3.1 document holding, for every enforced
// route with a path, each enforced operation with the key parameter, its
// problem responses (Retry-After on 409 and 503) and a 2XX response naming
// the headers idemgate adds to the upstream's answers (Idempotent-Replayed,
// and Idempotency-Key-Expires on advertise_expiry routes), to merge into an
// API's own spec. The defaults
// route, which stands for every other path, has no path to put it under:
// its parameter is in components for use elsewhere.
func openAPI(doc publishedPolicy) map[string]any {
	paths := map[string]any{}
	params := map[string]any{}
	advertised := false
	for _, r := range doc.Routes {
		keyParam := "IdempotencyKey"
		if r.Key.From == string(identity.KeyFromHeader) {
			if r.Key.Header != "Idempotency-Key" || r.Key.Required {
				keyParam = "IdempotencyKey_" + r.Name
			}
			// The key has at most MaxLength characters; the field value
			// may be longer, as an sf-string's quotes and backslash
			// escapes count in the field but not in the key, hence the
			// schema's maxLength of 2*MaxLength+2 and the extension.
			params[keyParam] = map[string]any{
				"name": r.Key.Header, "in": "header", "required": r.Key.Required,
				"description": "Idempotency key: " + r.Key.Syntax + ". A retry with the same key and the same request gets the original response. " +
					"The key itself has at most " + strconv.Itoa(r.Key.MaxLength) + " characters (x-idemgate-key-max-length, max_length in --format json); the field value may have up to " +
					strconv.Itoa(2*r.Key.MaxLength+2) + " (maxLength), because the quotes and backslash escapes of an sf-string count in the field but not in the key.",
				"schema":                    map[string]any{"type": "string", "minLength": 1, "maxLength": 2*r.Key.MaxLength + 2},
				"x-idemgate-key-max-length": r.Key.MaxLength,
			}
		}
		if r.Path == "" {
			continue
		}
		path := strings.TrimSuffix(pathParamRE.ReplaceAllStringFunc(r.Path, func(m string) string {
			if m == "{$}" {
				return ""
			}
			return "{" + strings.TrimSuffix(strings.Trim(m, "{}"), "...") + "}"
		}), "{$}")
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		var parameters []any
		if r.Key.From == string(identity.KeyFromHeader) {
			parameters = append(parameters, map[string]any{"$ref": "#/components/parameters/" + keyParam})
		}
		for _, m := range pathParamRE.FindAllStringSubmatch(r.Path, -1) {
			if m[1] != "" {
				parameters = append(parameters, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
		}
		responses := map[string]any{}
		byStatus := map[int][]publishedIssue{}
		for _, p := range r.Problems {
			byStatus[p.Status] = append(byStatus[p.Status], p)
		}
		for status, ps := range byStatus {
			var desc []string
			examples := map[string]any{}
			for _, p := range ps {
				slug := p.Slug
				desc = append(desc, "`"+slug+"`: "+p.Title+" ("+p.Action+")")
				examples[slug] = map[string]any{"value": map[string]any{"type": p.Type, "title": p.Title, "status": p.Status}}
			}
			slices.Sort(desc)
			resp := map[string]any{
				"description": "Answered by idemgate: " + strings.Join(desc, "; "),
				"content": map[string]any{"application/problem+json": map[string]any{
					"schema": map[string]any{"$ref": "#/components/schemas/Problem"}, "examples": examples}},
			}
			if status == problem.InProgress.Status || status == problem.StoreUnavailable.Status {
				resp["headers"] = map[string]any{"Retry-After": map[string]any{"$ref": "#/components/headers/RetryAfter"}}
			}
			responses[strconv.Itoa(status)] = resp
		}
		// The upstream's own answers: what idemgate adds to them.
		success := map[string]any{"Idempotent-Replayed": map[string]any{"$ref": "#/components/headers/IdempotentReplayed"}}
		if r.AdvertiseExpiry {
			success["Idempotency-Key-Expires"] = map[string]any{"$ref": "#/components/headers/IdempotencyKeyExpires"}
			advertised = true
		}
		responses["2XX"] = map[string]any{
			"description": "The upstream's response; a retry with the same key and request gets the stored one again (replayed statuses: " + strings.Join(r.ReplayStatuses, ", ") + ").",
			"headers":     success,
		}
		for _, m := range r.Methods {
			item[strings.ToLower(m)] = map[string]any{
				"parameters":                   parameters,
				"responses":                    responses,
				"x-idemgate-route":             r.Name,
				"x-idemgate-fingerprint":       r.Fingerprint,
				"x-idemgate-retention-seconds": r.RetentionSeconds,
			}
		}
	}
	headers := map[string]any{
		"IdempotentReplayed": map[string]any{
			"description": "true on a response answered from the record of an earlier request with the same key and request (a replay); absent on the answer of the request that ran.",
			"schema":      map[string]any{"type": "string", "enum": []string{"true"}},
		},
		"RetryAfter": map[string]any{
			"description": "Seconds to wait before retrying with the same key (RFC 9110 section 10.2.3).",
			"schema":      map[string]any{"type": "integer", "minimum": 0},
		},
	}
	if advertised {
		headers["IdempotencyKeyExpires"] = map[string]any{
			"description": "HTTP-date (RFC 9110 section 5.6.7) until which a retry with this key is answered from the record; after it the key is forgotten.",
			"schema":      map[string]any{"type": "string"},
		}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Idempotency (idemgate)", "version": publishedFormat,
			"description": "Fragment to merge into the API's own description: the idempotency key parameter and the problem responses of every enforced operation."},
		"paths": paths,
		"components": map[string]any{
			"parameters": params,
			"headers":    headers,
			"schemas": map[string]any{"Problem": map[string]any{
				"type": "object", "required": []string{"type", "title", "status"},
				"properties": map[string]any{
					"type": map[string]any{"type": "string", "format": "uri"}, "title": map[string]any{"type": "string"},
					"status": map[string]any{"type": "integer"}, "detail": map[string]any{"type": "string"},
				},
			}},
		},
	}
}

// typeURI is the type URI of k as the proxy writes it: under the operator's
// problems.type_base when set (problem.Publisher), else problem.Base.
func typeURI(k problem.Kind, typeBase string) string {
	if typeBase == "" {
		return k.Type()
	}
	return typeBase + k.Slug
}
