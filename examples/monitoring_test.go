package examples_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

const (
	rulesFile     = "prometheus/kvxds-rules.yaml"
	dashboardFile = "grafana/kvxds.json"
)

// loadRules parses the rule file with Prometheus's own rule parser, which
// also parses every expression and template.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promQL, slog.New(slog.DiscardHandler))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return groups
}

// The rule file loads in Prometheus, every alert waits, has a severity and
// says what is wrong, and names are unique.
func TestRules(t *testing.T) {
	groups := loadRules(t)
	seen := map[string]bool{}
	alerts := 0
	for _, g := range groups.Groups {
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rules", g.Name)
		}
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if seen[name] {
				t.Errorf("%s defined twice", name)
			}
			seen[name] = true
			if r.Record != "" {
				continue
			}
			alerts++
			if r.For <= 0 {
				t.Errorf("%s: no for:", name)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", name, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
			}
		}
	}
	for _, want := range []string{"KvxdsPoolHotspot", "KvxdsReplicaMetricsFailing", "KvxdsXDSNacks", "KvxdsNoLeader", "KvxdsFleetUpdateErrors", "KvxdsNoXDSStreams"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts")
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title         string                    `json:"title"`
	UID           string                    `json:"uid"`
	SchemaVersion int                       `json:"schemaVersion"`
	Panels        []panel                   `json:"panels"`
	Templating    struct{ List []variable } `json:"templating"`
}

type panel struct {
	ID         int                       `json:"id"`
	Type       string                    `json:"type"`
	Title      string                    `json:"title"`
	Datasource *datasource               `json:"datasource"`
	GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []target                  `json:"targets"`
	Panels     []panel                   `json:"panels"` // a collapsed row's
}

type target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *datasource `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
}

// variableQuery is the query of a Prometheus query variable: a string,
// or an object holding it.
func (v variable) variableQuery() (string, error) {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s, nil
	}
	var o struct{ Query string }
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %s: query: %w", v.Name, err)
	}
	return o.Query, nil
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns the dashboard's panels, those of collapsed rows
// included.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// builtinVariables are Grafana's own, with a value to parse them with.
var builtinVariables = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "6h",
	"__interval_ms": "60000", "__range_s": "21600",
}

// variableRef is $name, ${name}, ${name:format} or [[name]].
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces the template variables in expr with a value each,
// as Grafana does before it sends a query; a variable neither the
// dashboard nor Grafana defines is an error.
func substitute(expr string, vars map[string]string) (string, error) {
	var err error
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := builtinVariables[name]; ok {
			return v
		}
		err = errors.Join(err, fmt.Errorf("undefined variable $%s", name))
		return ref
	})
	return out, err
}

// labelValuesQuery is Grafana's label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// query is one PromQL expression of the dashboard, with where it is and
// the legend naming its series.
type query struct {
	where, expr, legend string
}

// dashboardQueries returns every query of d with its variables
// substituted: panel targets, and the selectors of label_values
// variables as a query by the variable's label.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			vars[v.Name] = "prometheus"
		default:
			vars[v.Name] = "value"
		}
	}
	var out []query
	add := func(where, expr, legend string) {
		e, err := substitute(expr, vars)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		out = append(out, query{where, e, legend})
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.variableQuery()
		if err != nil {
			t.Error(err)
			continue
		}
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(selector, label)", v.Name, q)
			continue
		}
		add("variable "+v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), "")
	}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			add(fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr, tg.LegendFormat)
		}
	}
	return out
}

// The dashboard decodes, declares its datasource and pool variables, and
// every panel queries that datasource with an expression Prometheus
// parses once Grafana has substituted the variables.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (datasource references by uid)", d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("variable datasource: type %q, query %s; want a Prometheus datasource variable", v.Type, v.Query)
	}
	if q, err := vars["pool"].variableQuery(); err != nil || !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ", pool)") {
		t.Errorf("variable pool: query %q (%v), want label_values(..., pool)", q, err)
	}
	ids := map[int]bool{}
	targets := 0
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, ds := range []*datasource{p.Datasource} {
			if ds == nil || ds.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, ds)
			}
		}
		for _, tg := range p.Targets {
			targets++
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: datasource %+v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	if targets == 0 {
		t.Fatal("no queries")
	}
	for _, q := range dashboardQueries(t, d) {
		if _, err := promQL.ParseExpr(q.expr); err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
		}
	}
}

// substitute replaces what Grafana replaces and nothing else.
func TestSubstitute(t *testing.T) {
	vars := map[string]string{"pool": "chat", "job": "kvxds"}
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{in: `x{pool=~"$pool"}`, want: `x{pool=~"chat"}`},
		{in: `x{pool=~"${pool}", job=~"${job:regex}"}`, want: `x{pool=~"chat", job=~"kvxds"}`},
		{in: `rate(x{pool=~"[[pool]]"}[$__rate_interval])`, want: `rate(x{pool=~"chat"}[5m])`},
		{in: `x{pool=~"$nothing"}`, err: true},
	} {
		got, err := substitute(tc.in, vars)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("substitute(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// The checker rejects what is not exported or not labelled so, and
// accepts what is.
func TestChecker(t *testing.T) {
	c := checker{exported: series{
		"kvxds_pool_hotspot":    {"pool": true},
		"kvxds_replica_up":      {"pool": true, "replica": true},
		"kvxds_scrapes_total":   {"pool": true, "replica": true, "result": true},
		"kvxds_d_bucket":        {"pool": true, "le": true},
		"kvxds_leader":          {"pool": true},
		"kvxds_xds_nacks_total": {"clients": true, "type": true},
	}}
	for _, tc := range []struct {
		expr   string
		labels []string // of the result, when valid
		err    string   // a substring of the error, when not
	}{
		{expr: `max by (job, pool) (kvxds_leader) == 0`, labels: []string{"job", "pool"}},
		{expr: `kvxds_replica_up{pool="chat"} == 0`, labels: []string{"instance", "job", "pool", "replica"}},
		{expr: `histogram_quantile(0.9, sum by (pool, le) (rate(kvxds_d_bucket[5m])))`, labels: []string{"pool"}},
		{expr: `sum by (pool) (rate(kvxds_scrapes_total{result!="ok"}[5m])) / on (pool) group_left () count by (pool) (kvxds_replica_up)`, labels: []string{"pool"}},
		{expr: `count by (job, pool) (kvxds_replica_up == 0) / count by (job, pool) (kvxds_replica_up)`, labels: []string{"job", "pool"}},
		{expr: `kvxds_pool_hotspot and on (pool) kvxds_replica_up`, labels: []string{"instance", "job", "pool"}},
		{expr: `{__name__="kvxds_pool_hotspot"}`, labels: []string{"instance", "job", "pool"}},
		{expr: `kvxds_bogus_total`, err: `"kvxds_bogus_total" is not a series kvxds exports`},
		{expr: `rate(kvxds_nacks_total[5m]) > 0`, err: `"kvxds_nacks_total" is not a series`},
		{expr: `{__name__=~"kvxds_.*"}`, err: `"" is not a series`},
		{expr: `kvxds_d`, err: `"kvxds_d" is not a series`},
		{expr: `kvxds_pool_hotspot{replica="a"}`, err: `matching on "replica"`},
		{expr: `sum by (replica) (kvxds_pool_hotspot)`, err: `grouping by "replica"`},
		{expr: `sum by (pool) (sum by (job) (kvxds_replica_up))`, err: `grouping by "pool"`},
		{expr: `kvxds_replica_up * on (replica) kvxds_pool_hotspot`, err: `matching on "replica"`},
		{expr: `kvxds_replica_up * on (pool) group_left (result) kvxds_pool_hotspot`, err: `including "result"`},
		{expr: `sum(kvxds_leader`, err: `unclosed left parenthesis`},
	} {
		got, errs := c.check(tc.expr)
		err := errors.Join(errs...)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.expr, err)
		case tc.err == "" && !slices.Equal(slices.Sorted(maps.Keys(got)), tc.labels):
			t.Errorf("%s: result labels %s, want %v", tc.expr, names(got), tc.labels)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.expr, err, tc.err)
		}
	}
}

// Every series the rules and the dashboard query is one that a running
// kvxds exports, with the labels they use; every label an alert's
// annotations or a panel's legend names is on the query's result.
func TestMonitoringUsesExportedSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kvxds and simulated replicas")
	}
	c := checker{exported: liveSeries(t)}

	t.Run("rules", func(t *testing.T) {
		for _, g := range loadRules(t).Groups {
			for _, r := range g.Rules {
				got, errs := c.check(r.Expr)
				got = got.union(nil) // a copy, never nil
				for l := range r.Labels {
					got[l] = true
				}
				for _, a := range r.Annotations {
					errs = append(errs, templateLabels("annotation", a, annotationLabel, got)...)
				}
				for _, err := range errs {
					t.Errorf("%s: %v", r.Alert+r.Record, err)
				}
			}
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		for _, q := range dashboardQueries(t, loadDashboard(t)) {
			got, errs := c.check(q.expr)
			got = got.union(nil)
			errs = append(errs, templateLabels("legend", q.legend, legendLabel, got)...)
			for _, err := range errs {
				t.Errorf("%s: %v", q.where, err)
			}
		}
	})
	// The live set rejects what kvxds does not export.
	for _, expr := range []string{
		`kvxds_pool_hit_rate_bogus`,
		`sum by (pool) (kvxds_replica_queue_depth)`,
		`kvxds_pool_hit_rate{replica="a"}`,
		`kvxds_scrape_duration_seconds`,
	} {
		if _, errs := c.check(expr); len(errs) == 0 {
			t.Errorf("%s: accepted against the series kvxds exports", expr)
		}
	}
}
