package policy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
)

// Describe writes the effective policy of every route, in Routes order
// (file order, then the defaults route), as a YAML list that uses the
// config file's key names; sizes are in bytes, durations in Go syntax. It
// returns the first write error.
func (p *Policy) Describe(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for i, r := range p.Routes() {
		if i > 0 {
			bw.WriteString("\n")
		}
		r.describe(bw)
	}
	return bw.Flush()
}

// AuthorizationOwnerTradeoff is what owner: authorization costs, in one
// line; Describe (and so `idemgate validate`) prints it beside every route
// that uses it.
const AuthorizationOwnerTradeoff = "a refreshed or rotated token is a new owner, so a retry after a token refresh runs again"

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func (r *Route) describe(w *bufio.Writer) {
	kv := func(k, v string) { fmt.Fprintf(w, "  %s: %s\n", k, v) }
	fmt.Fprintf(w, "- name: %s\n", strconv.Quote(r.Name))
	kv("match", strconv.Quote(r.Match))
	if r.Upstream != nil {
		kv("upstream", strconv.Quote(r.Upstream.Redacted()))
	} else {
		kv("upstream", "upstream.url")
	}
	if r.Match != "" {
		// Apart, so that a host read out of a forgotten leading slash
		// shows (TestValidateRejectsBareWordHost).
		host := patternHost(r.Match)
		if host == "" {
			host = "any"
		}
		kv("host", host)
		kv("path", strconv.Quote(patternPath(r.Match)))
	}
	kv("mode", string(r.Mode))
	kv("scope", strconv.Quote(r.Scope))
	kv("header", r.Header)
	if r.Key.FromBody() {
		kv("key", "{from: body, pointer: "+strconv.Quote(r.Key.Pointer)+"} # read from the JSON body, which is read first")
	}
	kv("methods", "["+strings.Join(r.Methods, ", ")+"]")
	kv("required", strconv.FormatBool(r.Required))
	switch r.Owner.Kind {
	case identity.OwnerAuthorization:
		kv("owner", strconv.Quote(r.Owner.String())+" # "+AuthorizationOwnerTradeoff)
	case identity.OwnerList:
		quoted := make([]string, len(r.Owner.Parts))
		for i, p := range r.Owner.Parts {
			quoted[i] = strconv.Quote(p.String())
		}
		kv("owner", "["+strings.Join(quoted, ", ")+"] # one owner per combination of these values (e.g. a platform credential acting for one account)")
	default:
		kv("owner", strconv.Quote(r.Owner.String()))
	}
	if j := r.JWT; j != nil {
		src := "jwks_file: " + strconv.Quote(j.JWKSFile)
		if j.JWKSURL != "" {
			src = "jwks_url: " + strconv.Quote(j.JWKSURL)
		}
		fmt.Fprintf(w, "  jwt: {%s, issuers: [%s], audiences: [%s], claims: [%s]} # exp/nbf checked with %v leeway\n",
			src, quoteList(j.Issuers), quoteList(j.Audiences), quoteList(j.Claims), identity.JWTLeeway)
	}
	kv("allow_global_keys", strconv.FormatBool(r.AllowGlobalKeys))
	exclude := ""
	if len(r.Fingerprint.Exclude) > 0 {
		exclude = ", exclude: [" + quoteList(r.Fingerprint.Exclude) + "]"
	}
	if r.Fingerprint.Proto != nil {
		exclude += ", descriptors: " + strconv.Quote(r.Fingerprint.Proto.Path)
	}
	media := fingerprint.MediaTypesExact
	if r.Fingerprint.NormalizeMediaTypes {
		media = fingerprint.MediaTypesNormalize
	}
	fmt.Fprintf(w, "  fingerprint: {headers: [%s], query: %t, body: %s%s, media_types: %s}\n",
		strings.Join(r.Fingerprint.Headers, ", "), r.Fingerprint.Query, r.Fingerprint.Body, exclude, media)
	kv("fingerprint_recipe", strconv.Quote(r.Recipe())+" # recorded with each key: a retry is compared by its record's recipe")
	kv("lease", r.Lease.String())
	if r.Retention == 0 {
		kv("retention", "0s # completed records are kept forever")
	} else {
		kv("retention", r.Retention.String())
	}
	kv("concurrent", string(r.Concurrent))
	kv("wait_timeout", r.WaitTimeout.String())
	kv("replay_statuses", quotedStatuses(r.ReplayStatuses))
	if len(r.UnknownStatuses) > 0 {
		kv("unknown_statuses", quotedStatuses(r.UnknownStatuses)+" # passed on, the claim kept: outcome unknown")
	} else {
		// Shown empty: a gateway's 504 releasing the key is the default a
		// reader of validate's output most needs to see.
		kv("unknown_statuses", "[] # any status not replayed releases the key: a retry runs again")
	}
	kv("replay_grpc_codes", "["+strings.Join(r.GRPCCodeNames(), ", ")+"] # for gRPC calls, by grpc-status")
	kv("max_request_bytes", strconv.FormatInt(r.MaxRequestBytes, 10))
	kv("max_response_bytes", strconv.FormatInt(r.MaxResponseBytes, 10))
	kv("on_store_error", string(r.OnStoreError))
	kv("on_abandoned", string(r.OnAbandoned))
	kv("advertise_expiry", strconv.FormatBool(r.AdvertiseExpiry))
	if r.ResourceFrom != "" {
		kv("resource_from", r.ResourceFrom)
		kv("tombstone_methods", "["+strings.Join(r.TombstoneMethods, ", ")+"]")
	}
}
