package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool, which scripts/promtool.sh installs
// (Debian's prometheus package). Without it the test is skipped, saying so;
// in CI (CI=true) it fails instead.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	msg := "promtool is missing (scripts/promtool.sh installs Debian's prometheus package; make test runs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// The rules are valid (promtool check rules) and pass their unit tests
// (promtool test rules alerts_test.yml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// databaseWide are the gauges that every process of a kind exports with the
// same database-wide value: summing them across processes is wrong.
var databaseWide = []string{
	"leadintake_keys",
	"leadintake_oldest_processing_key_age_seconds",
	"leadintake_callback_oldest_pending_age_seconds",
	"leadintake_queue_jobs",
	"leadintake_queue_oldest_available_seconds",
	"leadintake_downstream_up",
	"leadintake_leads_waiting",
	"leadintake_leads_waiting_oldest_seconds",
}

// checkQuery parses q and checks that it selects named metrics, and that
// the database-wide gauges are read through max.
func checkQuery(t *testing.T, q Query) {
	t.Helper()
	e, err := Parse(q.Expr)
	if err != nil {
		t.Errorf("%s: %v", q, err)
		return
	}
	if _, err := MetricNames(q.Expr); err != nil {
		t.Errorf("%s: %v", q, err)
	}
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok || !slices.Contains(databaseWide, vs.Name) {
			return nil
		}
		underMax := false
		for _, p := range path {
			if a, ok := p.(*parser.AggregateExpr); ok && a.Op == parser.MAX {
				underMax = true
			}
		}
		if !underMax {
			t.Errorf("%s: %s is database-wide (every process exports it): aggregate it with max", q, vs.Name)
		}
		return nil
	})
}

// testFile is the part of alerts_test.yml this test reads.
type testFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name  string `yaml:"name"`
		Evals []struct {
			Alert     string `yaml:"alertname"`
			ExpAlerts []struct {
				Labels      map[string]string `yaml:"exp_labels"`
				Annotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert has a severity, a summary and a description, a sound
// expression, and unit tests where it fires (with its annotations) and where
// it must not.
func TestAlertsShape(t *testing.T) {
	t.Parallel()
	rf, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("prometheus", "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf testFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&tf); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	if !slices.Equal(tf.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("alerts_test.yml: rule_files %v, want [alerts.yml]", tf.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, ev := range tc.Evals {
			if len(ev.ExpAlerts) == 0 {
				quiet[ev.Alert] = true
				continue
			}
			fires[ev.Alert] = true
			for _, a := range ev.ExpAlerts {
				if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
					t.Errorf("alerts_test.yml: %q: an expected %s without its summary and description", tc.Name, ev.Alert)
				}
			}
		}
	}

	seen := map[string]bool{}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if seen[r.Alert] {
				t.Errorf("alert %s: defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if !strings.HasPrefix(r.Alert, "Leadintake") {
				t.Errorf("alert %s: name without the Leadintake prefix", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			checkQuery(t, Query{File: AlertsFile, Where: r.Alert, Expr: r.Expr})
			if !fires[r.Alert] {
				t.Errorf("alert %s: alerts_test.yml has no case where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alert %s: alerts_test.yml has no case where it must not fire", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml holds no alert")
	}
	for a := range fires {
		if !seen[a] {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", a)
		}
	}
	// Operators are sent to the commands that settle keys.
	if !bytes.Contains(alertsYAML, []byte("api keys list --state needs_reconciliation")) {
		t.Errorf("alerts.yml never mentions `api keys list --state needs_reconciliation`")
	}
}

// The dashboard: a Prometheus data source variable that every panel and
// target uses, unique panel ids, panels that fit the grid without
// overlapping, and sound expressions.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d, err := LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard: uid %q, title %q", d.UID, d.Title)
	}
	hasVar := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasVar = true
		}
	}
	if !hasVar {
		t.Fatalf("dashboard: no data source variable `datasource` of type prometheus")
	}
	usesVar := func(ds *DatasourceRef) bool {
		return ds != nil && ds.Type == "prometheus" && (ds.UID == "${datasource}" || ds.UID == "$datasource")
	}

	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	// place marks the panel's cells taken, or returns the panel that has
	// one of them already.
	place := func(x0, y0, w, h int, title string) (string, int, int, bool) {
		for x := x0; x < x0+w; x++ {
			for y := y0; y < y0+h; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					return other, x, y, true
				}
				taken[cell{x, y}] = title
			}
		}
		return "", 0, 0, false
	}
	queries := 0
	for _, p := range d.AllPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
		}
		if other, x, y, ok := place(g.X, g.Y, g.W, g.H, p.Title); ok {
			t.Errorf("panel %q overlaps panel %q at (%d, %d)", p.Title, other, x, y)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d: no title", p.ID)
		}
		if !usesVar(p.Datasource) {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !usesVar(tg.Datasource) {
				t.Errorf("panel %q, target %s: datasource %+v, want the ${datasource} variable", p.Title, tg.RefID, tg.Datasource)
			}
			checkQuery(t, Query{File: DashboardFile, Where: p.Title + "/" + tg.RefID, Expr: tg.Expr})
			queries++
		}
	}
	if queries == 0 {
		t.Fatal("dashboard: no query")
	}
}

// Every metric the processes are documented to export is on the dashboard
// (the e2e test TestObservabilityMetricsExported holds them to what the
// processes really export).
func TestDashboardCoversMetrics(t *testing.T) {
	t.Parallel()
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	onDashboard := map[string]bool{}
	for _, q := range qs {
		if q.File != DashboardFile {
			continue
		}
		names, err := MetricNames(q.Expr)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for _, n := range names {
			onDashboard[n] = true
		}
	}
	for _, m := range []string{
		"leadintake_submissions_total", "leadintake_http_request_duration_seconds_bucket", "leadintake_keys",
		"leadintake_oldest_processing_key_age_seconds", "leadintake_waiting_requests", "leadintake_ready",
		"leadintake_leads_finished_total", "leadintake_jobs_total", "leadintake_downstream_calls_total",
		"leadintake_downstream_call_duration_seconds_bucket", "leadintake_reconcile_actions_total",
		"leadintake_keys_deleted_total", "leadintake_callback_deliveries_total",
		"leadintake_callback_delivery_seconds_bucket", "leadintake_callback_oldest_pending_age_seconds",
		"leadintake_queue_jobs", "leadintake_queue_oldest_available_seconds", "leadintake_leads_erased_total",
		"leadintake_downstream_up", "leadintake_leads_waiting", "leadintake_leads_waiting_oldest_seconds",
		"leadintake_spam_total",
	} {
		if !onDashboard[m] {
			t.Errorf("dashboard: no panel shows %s", m)
		}
	}
}

// MetricNames refuses selectors it cannot name, and Parse refuses variables
// it does not know.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	got, err := MetricNames(`sum(rate(a_total{x="1"}[$__rate_interval])) / sum(rate(a_total[5m])) + on() max(b)`)
	if err != nil || !slices.Equal(got, []string{"a_total", "b"}) {
		t.Errorf("MetricNames: %v, %v; want [a_total b]", got, err)
	}
	for _, bad := range []string{`{job="x"}`, `{__name__=~"a.*"}`, `rate(a[$unknown])`, `sum(`} {
		if _, err := MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%q): no error", bad)
		}
	}
}
