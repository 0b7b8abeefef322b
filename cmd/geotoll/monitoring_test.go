package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/internal/testenv"
)

// The monitoring kit operators load: Prometheus rules and a Grafana
// dashboard (README.md, "Monitoring").
const (
	rulesPath     = "../../deploy/prometheus/geotoll.rules.yml"
	rulesTestPath = "../../deploy/prometheus/geotoll.rules.test.yml"
	dashboardPath = "../../deploy/grafana/geotoll.json"
)

// ruleFile is a Prometheus rule file, every field it may hold.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Limit    int    `yaml:"limit"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

var (
	promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)
	metricName   = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	alertName    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	labelsRef    = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	helpWord     = regexp.MustCompile(`[a-z0-9][a-z0-9_-]*`)
	labelValues  = regexp.MustCompile(`^label_values\((?:([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
)

// loadRules reads the rule file strictly: unknown keys, duplicate keys
// and anything but one document are errors, and every rule is an alert
// (for, a severity, a summary and a description) or a recording rule
// (a level:metric:operations name), never both.
func loadRules(t *testing.T, path string) ruleFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := dec.Decode(new(any)); err != io.EOF {
		t.Fatalf("%s: more than one YAML document (%v)", path, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no groups", path)
	}
	groups, names := map[string]bool{}, map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if g.Interval != "" && !promDuration.MatchString(g.Interval) {
			t.Errorf("group %s: interval %q", g.Name, g.Interval)
		}
		if len(g.Rules) == 0 {
			t.Errorf("group %s: no rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d (%s%s)", g.Name, i+1, r.Alert, r.Record)
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			}
			switch {
			case (r.Alert == "") == (r.Record == ""):
				t.Errorf("%s: must have exactly one of alert and record", where)
			case r.Record != "":
				if !metricName.MatchString(r.Record) || strings.Count(r.Record, ":") != 2 {
					t.Errorf("%s: a recorded name is level:metric:operations", where)
				}
				if r.For != "" || r.KeepFiringFor != "" || r.Annotations != nil {
					t.Errorf("%s: a recording rule has no for, keep_firing_for or annotations", where)
				}
				if names[r.Record] {
					t.Errorf("%s: recorded twice", where)
				}
				names[r.Record] = true
			default:
				if !alertName.MatchString(r.Alert) || names[r.Alert] {
					t.Errorf("%s: alert names are unique and CamelCase", where)
				}
				names[r.Alert] = true
				if !promDuration.MatchString(r.For) {
					t.Errorf("%s: for %q: every alert waits a while before it fires", where, r.For)
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
					t.Errorf("%s: severity %q, want critical, warning or info", where, s)
				}
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("%s: no %s annotation", where, a)
					}
				}
			}
		}
	}
	return f
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasourceRef           `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Panels     []panel                  `json:"panels"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

// dashboardDatasource is what every panel and target names: the
// dashboard's datasource variable, so it imports into any Grafana.
var dashboardDatasource = datasourceRef{Type: "prometheus", UID: "${DS_PROMETHEUS}"}

// dashboardQuery is one PromQL expression of the dashboard.
type dashboardQuery struct{ where, expr string }

// loadDashboard reads the dashboard and checks its shape; it returns its
// panels' expressions and its variables' label_values queries.
func loadDashboard(t *testing.T, path string) (exprs []dashboardQuery, variables []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard without title or uid")
	}
	hasDS := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			var q string
			hasDS = hasDS || v.Name == "DS_PROMETHEUS" && json.Unmarshal(v.Query, &q) == nil && q == "prometheus"
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
			}
			if v.Datasource == nil || *v.Datasource != dashboardDatasource {
				t.Errorf("variable %s: datasource %v, want %v", v.Name, v.Datasource, dashboardDatasource)
			}
			variables = append(variables, q.Query)
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable DS_PROMETHEUS of type prometheus")
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.ID == 0 || ids[p.ID] || p.Title == "" {
				t.Errorf("panel %d %q: ids are unique and titles set", p.ID, p.Title)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || *p.Datasource != dashboardDatasource || len(p.Targets) == 0 {
				t.Errorf("panel %q: datasource %v, %d targets", p.Title, p.Datasource, len(p.Targets))
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %q: refIds unique, expr set", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if tg.Datasource != nil && *tg.Datasource != dashboardDatasource {
					t.Errorf("panel %q target %s: datasource %v", p.Title, tg.RefID, tg.Datasource)
				}
				exprs = append(exprs, dashboardQuery{where: fmt.Sprintf("panel %q %s", p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return exprs, variables
}

// scrapeCatalog is what a /metrics scrape exports, as Prometheus stores
// it: with the target's labels, histograms as _bucket, _sum and _count,
// and up (Prometheus's own series per target).
func scrapeCatalog(t *testing.T, body []byte) seriesCatalog {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	cat := seriesCatalog{"up": {labels: labelSet(targetLabels...), values: map[string]map[string]bool{}}}
	for name, f := range families {
		info := &seriesInfo{labels: labelSet(targetLabels...), values: map[string]map[string]bool{}, help: map[string]bool{}}
		for _, w := range helpWord.FindAllString(f.GetHelp(), -1) {
			info.help[w] = true
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				info.labels[l.GetName()] = true
				if info.values[l.GetName()] == nil {
					info.values[l.GetName()] = map[string]bool{}
				}
				info.values[l.GetName()][l.GetValue()] = true
			}
		}
		cat[name] = info
		if f.GetType() == dto.MetricType_HISTOGRAM {
			bucket := &seriesInfo{labels: labelSet("le"), values: info.values, help: info.help}
			for l := range info.labels {
				bucket.labels[l] = true
			}
			cat[name+"_bucket"], cat[name+"_sum"], cat[name+"_count"] = bucket, info, info
		}
	}
	return cat
}

// checkRules checks every rule's expression against cat, adding the
// recorded series to it in file order, and every $labels.x of an alert's
// annotations against its expression's result.
func checkRules(f ruleFile, cat seriesCatalog) (used map[string]bool, errs []string) {
	used = map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			res, u, es := checkPromQL(r.Expr, cat)
			for m := range u {
				used[m] = true
			}
			for _, e := range es {
				errs = append(errs, fmt.Sprintf("%s%s: %s", r.Alert, r.Record, e))
			}
			if r.Record != "" {
				cat[r.Record] = &seriesInfo{labels: res.set}
				continue
			}
			for _, text := range r.Annotations {
				for _, m := range labelsRef.FindAllStringSubmatch(text, -1) {
					if !res.unknown && !res.set[m[1]] {
						errs = append(errs, fmt.Sprintf("%s: annotation names $labels.%s, not on its result %v", r.Alert, m[1], sortedKeys(res.set)))
					}
				}
			}
		}
	}
	return used, errs
}

// checkDashboard checks the dashboard's expressions and label_values
// variables against cat (with the recorded series).
func checkDashboard(exprs []dashboardQuery, variables []string, cat seriesCatalog) (used map[string]bool, errs []string) {
	used = map[string]bool{}
	for _, q := range exprs {
		_, u, es := checkPromQL(q.expr, cat)
		for m := range u {
			used[m] = true
		}
		for _, e := range es {
			errs = append(errs, q.where+": "+e)
		}
	}
	for _, v := range variables {
		m := labelValues.FindStringSubmatch(v)
		if m == nil {
			errs = append(errs, fmt.Sprintf("variable query %q is not label_values(metric, label)", v))
			continue
		}
		info, ok := cat[m[1]]
		if !ok || !info.labels[m[2]] {
			errs = append(errs, fmt.Sprintf("variable query %q: no such metric or label", v))
		}
		used[m[1]] = true
	}
	return used, errs
}

// TestPromQLCheck: the checker the monitoring test relies on finds what
// it is there to find.
func TestPromQLCheck(t *testing.T) {
	t.Parallel()
	cat := seriesCatalog{
		"req_total": {labels: labelSet("job", "instance", "route", "status"),
			values: map[string]map[string]bool{"status": {"200": true}}, help: labelSet("busy")},
		"dur_seconds_bucket": {labels: labelSet("job", "instance", "route", "le"), values: map[string]map[string]bool{}},
		"tok_total":          {labels: labelSet("job", "instance", "tier", "zoom"), values: map[string]map[string]bool{}},
		"rec:x:rate5m":       {labels: labelSet("job", "route")},
	}
	for _, tc := range []struct {
		name, expr string
		wantErr    string // "" for none
		wantLabels []string
	}{
		{"rate by route", `sum by (route) (rate(req_total{job=~"$job"}[$__rate_interval]))`, "", []string{"route"}},
		{"by after", `sum(rate(req_total[5m])) by (route, status)`, "", []string{"route", "status"}},
		{"quantile", `histogram_quantile(0.99, sum by (route, le) (rate(dur_seconds_bucket[5m]))) > 2`, "", []string{"route"}},
		{"ratio", `sum by (job) (rate(req_total{status=~"5.."}[5m])) / sum by (job) (rate(req_total[5m])) > 0.05`, "", []string{"job"}},
		{"recorded", `sum by (route) (rec:x:rate5m{job="a"})`, "", []string{"route"}},
		{"value from help", `req_total{status="busy"} or req_total{status=~"200|busy"}`, "", []string{"instance", "job", "route", "status"}},
		{"scalar both sides", `-1 * req_total offset 5m + 2 ^ 2`, "", []string{"instance", "job", "route", "status"}},
		{"unknown metric", `rate(reqs_total[5m])`, "reqs_total: not exported", nil},
		{"unknown matcher label", `req_total{tier="free"}`, `has no label "tier"`, nil},
		{"unknown value", `req_total{status="299"}`, `value "299"`, nil},
		{"unknown value in alternation", `req_total{status=~"200|2OO"}`, `value "2OO"`, nil},
		{"unknown by label", `sum by (tier) (rate(req_total[5m]))`, `label "tier" is not on`, nil},
		{"label summed away", `sum by (route) (sum by (status) (req_total))`, `label "route" is not on`, nil},
		{"le missing", `histogram_quantile(0.5, sum by (route) (rate(dur_seconds_bucket[5m])))`, "without le", nil},
		{"sides differ", `sum by (route) (req_total) / sum by (status) (req_total)`, "different labels", nil},
		{"on label missing", `req_total / on (tier) req_total`, `label "tier" of on/ignoring`, nil},
		{"zoom kept", `rate(tok_total[5m])`, `keeps label "zoom"`, nil},
		{"without", `sum without (instance) (tok_total)`, "without", nil},
		{"syntax", `sum by (route) (rate(req_total[5m])`, `expected ")"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, errs := checkPromQL(tc.expr, cat)
			if tc.wantErr == "" {
				if len(errs) > 0 || !slices.Equal(sortedKeys(res.set), tc.wantLabels) {
					t.Fatalf("labels %v errors %q, want %v and none", sortedKeys(res.set), errs, tc.wantLabels)
				}
				return
			}
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.wantErr) }) {
				t.Fatalf("errors %q, want one with %q", errs, tc.wantErr)
			}
		})
	}
}

// TestMonitoringFilesParse: the rule file and the dashboard are well
// formed (the metrics they read are checked against a real server by
// TestEndToEndMonitoring).
func TestMonitoringFilesParse(t *testing.T) {
	t.Parallel()
	f := loadRules(t, rulesPath)
	alerts, records := 0, 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts++
			} else {
				records++
			}
		}
	}
	exprs, _ := loadDashboard(t, dashboardPath)
	if alerts == 0 || records == 0 || len(exprs) == 0 {
		t.Fatalf("%d alerts, %d recording rules, %d panel queries", alerts, records, len(exprs))
	}
}

// TestMonitoringReadmeNamesEveryAlert: README's "Monitoring" table lists
// the alerts the rule file has, each with its severity, and no other.
func TestMonitoringReadmeNamesEveryAlert(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Monitoring\n")
	if !ok {
		t.Fatal(`README.md has no "## Monitoring" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]string{} // alert: severity
	for _, m := range regexp.MustCompile("(?m)^\\| `(Geotoll[A-Za-z]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = m[2]
	}
	for _, g := range loadRules(t, rulesPath).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if sev, ok := documented[r.Alert]; !ok || sev != r.Labels["severity"] {
				t.Errorf("README \"Monitoring\" lists %s as %q, the rules as %q", r.Alert, sev, r.Labels["severity"])
			}
			delete(documented, r.Alert)
		}
	}
	for a := range documented {
		t.Errorf("README \"Monitoring\" lists %s, which the rules do not have", a)
	}
}

// TestMonitoringPromtool runs Prometheus's own checker on the rules, and
// their unit tests (alerts that fire, and do not, on made-up series), when
// promtool is installed (Debian: apt-get install prometheus); the Go tests
// above are the guarantee.
func TestMonitoringPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.Required() {
			t.Fatal("promtool not installed (make promtool installs it)")
		}
		t.Skip("promtool not installed (make promtool installs it)")
	}
	for _, args := range [][]string{{"check", "rules", rulesPath}, {"test", "rules", rulesTestPath}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
