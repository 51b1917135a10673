package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// metric is one series family idemgate exports (the list in the brief).
type metric struct {
	histogram bool
	labels    []string
}

// idemgateMetrics is the metric list the dashboard may use.
var idemgateMetrics = map[string]metric{
	"idemgate_requests_total":                      {labels: []string{"route", "outcome"}},
	"idemgate_upstream_duration_seconds":           {histogram: true, labels: []string{"route"}},
	"idemgate_store_operation_duration_seconds":    {histogram: true, labels: []string{"operation", "result"}},
	"idemgate_claims_in_flight":                    {},
	"idemgate_waiters":                             {},
	"idemgate_lease_takeovers_total":               {labels: []string{"route"}},
	"idemgate_heartbeat_failures_total":            {labels: []string{"route"}},
	"idemgate_stored_response_size_bytes":          {histogram: true, labels: []string{"route"}},
	"idemgate_config_reloads_total":                {labels: []string{"result"}},
	"idemgate_build_info":                          {labels: []string{"version", "goversion"}},
	"idemgate_store_up":                            {},
	"idemgate_store_ack_duration_seconds":          {histogram: true, labels: []string{"operation"}},
	"idemgate_store_writes_not_acknowledged_total": {labels: []string{"operation"}},
	"idemgate_replay_cache_total":                  {labels: []string{"result"}},
	"idemgate_request_duration_seconds":            {histogram: true, labels: []string{"route", "method", "code_class"}},
	"idemgate_tls_handshake_errors_total":          {labels: []string{"reason"}},
	"idemgate_store_waiting":                       {},
	"idemgate_store_admission_rejected_total":      {},
	"idemgate_stored_responses_damaged_total":      {labels: []string{"route"}},
	"idemgate_tls_reloads_total":                   {labels: []string{"file", "result"}},
}

// labelValues are the closed value sets of labels, per metric family and
// label (metrics.Outcome* constants, store operations, reload results).
var labelValues = map[string][]string{
	"idemgate_requests_total/outcome": {"forwarded", "replayed", "conflict", "mismatch", "invalid_key", "missing_key",
		"missing_owner", "too_large", "store_error", "passthrough", "fail_open", "upstream_error", "abandoned", "bad_request",
		"invalid_credentials", "shutting_down", "overloaded"},
	"idemgate_store_operation_duration_seconds/operation": {"claim", "complete", "release", "extend", "get", "delete", "ping"},
	"idemgate_store_operation_duration_seconds/result":    {"ok", "error"},
	"idemgate_config_reloads_total/result":                {"success", "failure", "restart_required"},
	"idemgate_replay_cache_total/result":                  {"hit", "miss"},
	"idemgate_request_duration_seconds/method":            {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "OTHER"},
	"idemgate_request_duration_seconds/code_class":        {"1xx", "2xx", "3xx", "4xx", "5xx"},
	"idemgate_tls_handshake_errors_total/reason": {"bad_certificate", "unknown_ca", "expired", "no_certificate",
		"protocol_version", "not_tls", "closed", "timeout", "other"},
}

// targetLabels are added by Prometheus to every scraped series (namespace
// by the Prometheus Operator's ServiceMonitor and by Kubernetes service
// discovery relabelling; absent elsewhere, and harmless in a grouping).
var targetLabels = []string{"instance", "job", "namespace"}

// dsVar is the dashboard's data source template variable.
const dsVar = "datasource"

var (
	metricRef = regexp.MustCompile(`\b(idemgate_[a-z0-9_]+)(\{[^}]*\})?`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping  = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	plainAlt  = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)
)

// resolveMetric maps a series name (with _bucket/_sum/_count of histograms)
// to its family.
func resolveMetric(series string) (name string, m metric, bucket bool, ok bool) {
	if m, ok := idemgateMetrics[series]; ok {
		return series, m, false, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(series, suf)
		if m, ok := idemgateMetrics[base]; cut && ok && m.histogram {
			return base, m, suf == "_bucket", true
		}
	}
	return "", metric{}, false, false
}

// checkExpr reports unknown metrics, labels and label values in one PromQL
// expression, and returns the metric families it uses.
func checkExpr(t reporter, where, expr string) []string {
	t.Helper()
	var used []string
	allowed := slices.Clone(targetLabels)
	for _, ref := range metricRef.FindAllStringSubmatch(expr, -1) {
		name, m, bucket, ok := resolveMetric(ref[1])
		if !ok {
			t.Errorf("%s: unknown metric %s in %q", where, ref[1], expr)
			continue
		}
		used = append(used, name)
		labels := append(slices.Clone(m.labels), targetLabels...)
		if bucket {
			labels = append(labels, "le")
		}
		allowed = append(allowed, labels...)
		for _, mt := range matcher.FindAllStringSubmatch(ref[2], -1) {
			label, op, value := mt[1], mt[2], mt[3]
			if !slices.Contains(labels, label) {
				t.Errorf("%s: %s has no label %q", where, name, label)
				continue
			}
			values, closed := labelValues[name+"/"+label]
			if !closed || strings.HasPrefix(value, "$") {
				continue
			}
			alts := []string{value}
			if op == "=~" || op == "!~" {
				if !plainAlt.MatchString(value) {
					continue
				}
				alts = strings.Split(value, "|")
			}
			for _, a := range alts {
				if !slices.Contains(values, a) {
					t.Errorf("%s: %s=%q is not a value of %s", where, label, a, label)
				}
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(allowed, l) {
				t.Errorf("%s: groups by %q, which none of its metrics has", where, l)
			}
		}
	}
	return used
}

func TestDashboard(t *testing.T) {
	p := path("deploy", "grafana", "idemgate-dashboard.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	var dash struct {
		Inputs        []any  `json:"__inputs"`
		SchemaVersion int    `json:"schemaVersion"`
		UID           string `json:"uid"`
		Title         string `json:"title"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
				Datasource *struct{ Type, UID string }
			}
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
				Type, UID string
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct {
					Type, UID string
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if dash.SchemaVersion < 36 || dash.SchemaVersion > 41 {
		t.Errorf("dashboard: schemaVersion %d, want about 39", dash.SchemaVersion)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard: uid and title must be set so provisioning is stable")
	}
	// File and sidecar provisioning do not resolve __inputs (only the UI
	// import does): the data source is a template variable instead, which
	// provisioning defaults to the Prometheus data source.
	if len(dash.Inputs) != 0 {
		t.Error("dashboard: __inputs only work through the UI import; use the datasource template variable")
	}
	hasVar := false
	for _, v := range dash.Templating.List {
		if v.Name == dsVar && v.Type == "datasource" && v.Query == "prometheus" {
			hasVar = true
		}
		if v.Datasource != nil && v.Datasource.UID != "${"+dsVar+"}" {
			t.Errorf("dashboard: variable %s uses data source %q, want ${%s}", v.Name, v.Datasource.UID, dsVar)
		}
	}
	if !hasVar {
		t.Errorf("dashboard: no templating variable %q of type datasource (query prometheus)", dsVar)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard: no panels")
	}

	used := map[string]bool{}
	quantiles := map[string][]string{}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, panel := range dash.Panels {
		where := "panel " + panel.Title
		if ids[panel.ID] {
			t.Errorf("%s: duplicate id %d", where, panel.ID)
		}
		ids[panel.ID] = true
		if panel.Datasource.UID != "${"+dsVar+"}" {
			t.Errorf("%s: datasource uid %q, want ${%s}", where, panel.Datasource.UID, dsVar)
		}
		if panel.GridPos.W <= 0 || panel.GridPos.H <= 0 || panel.GridPos.X+panel.GridPos.W > 24 {
			t.Errorf("%s: gridPos %+v off the 24-column grid", where, panel.GridPos)
		}
		for x := panel.GridPos.X; x < panel.GridPos.X+panel.GridPos.W; x++ {
			for y := panel.GridPos.Y; y < panel.GridPos.Y+panel.GridPos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("%s overlaps panel %s", where, other)
					x, y = 1<<30, 1<<30
					break
				}
				taken[cell{x, y}] = panel.Title
			}
		}
		if len(panel.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		for _, tg := range panel.Targets {
			if tg.Datasource.UID != "" && tg.Datasource.UID != "${"+dsVar+"}" {
				t.Errorf("%s: target datasource %q", where, tg.Datasource.UID)
			}
			for _, m := range checkExpr(t, where, tg.Expr) {
				used[m] = true
			}
			for _, q := range regexp.MustCompile(`histogram_quantile\(\s*([0-9.]+)\s*,[^_]*?(idemgate_[a-z_]+)_bucket`).FindAllStringSubmatch(tg.Expr, -1) {
				quantiles[q[2]] = append(quantiles[q[2]], q[1])
			}
		}
	}
	for name := range idemgateMetrics {
		if !used[name] {
			t.Errorf("dashboard: no panel shows %s", name)
		}
	}
	for name, want := range map[string][]string{
		"idemgate_upstream_duration_seconds":        {"0.5", "0.99"},
		"idemgate_store_operation_duration_seconds": {"0.99"},
	} {
		for _, q := range want {
			if !slices.Contains(quantiles[name], q) {
				t.Errorf("dashboard: no histogram_quantile(%s, ...%s_bucket...)", q, name)
			}
		}
	}
}

// TestDashboardCheckRejects proves the PromQL check catches a wrong metric,
// label and outcome.
func TestDashboardCheckRejects(t *testing.T) {
	rec := &recorder{}
	checkExpr(rec, "bad", `sum by (status) (rate(idemgate_requests_total{outcome=~"replayed|replay",code="200"}[5m])) + idemgate_request_total + idemgate_waiters_bucket`)
	for _, want := range []string{`outcome="replay"`, `no label "code"`, "unknown metric idemgate_request_total", "unknown metric idemgate_waiters_bucket", `groups by "status"`} {
		if !rec.has(want) {
			t.Errorf("check did not report %s; got %q", want, rec.msgs)
		}
	}
}
