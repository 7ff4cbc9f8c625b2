package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// AlertsFile and DashboardFile are the paths, in this directory, of the
// alerting rules and of the Grafana dashboard.
const (
	AlertsFile    = "prometheus/alerts.yml"
	DashboardFile = "grafana/leadintake.json"
)

//go:embed prometheus/alerts.yml
var alertsYAML []byte

//go:embed grafana/leadintake.json
var dashboardJSON []byte

// Query is one PromQL expression of the alerting rules or the dashboard.
type Query struct {
	// File is AlertsFile or DashboardFile.
	File string
	// Where names the expression's place: the alert, or the panel and the
	// target's refId.
	Where string
	// Expr is the expression as written (the dashboard's with Grafana's
	// variables in it).
	Expr string
}

// String names the query by its file and place.
func (q Query) String() string { return q.File + ": " + q.Where }

// RuleFile is the part of a Prometheus rule file that Queries reads.
type RuleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []Rule `yaml:"rules"`
	} `yaml:"groups"`
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Alerts returns the embedded alerting rules, parsed.
func Alerts() (RuleFile, error) {
	var rf RuleFile
	if err := yaml.Unmarshal(alertsYAML, &rf); err != nil {
		return rf, fmt.Errorf("%s: %w", AlertsFile, err)
	}
	return rf, nil
}

// Dashboard is the part of a Grafana dashboard that Queries and the tests
// read.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Panel is one panel of a dashboard; a row may hold panels of its own (when
// collapsed).
type Panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *DatasourceRef           `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Datasource *DatasourceRef `json:"datasource"`
		Expr       string         `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// DatasourceRef names a panel's or a target's data source.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// LoadDashboard returns the embedded dashboard, parsed.
func LoadDashboard() (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return d, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return d, nil
}

// AllPanels returns the dashboard's panels, those inside rows included.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// Queries returns every PromQL expression of the alerting rules and of the
// dashboard.
func Queries() ([]Query, error) {
	rf, err := Alerts()
	if err != nil {
		return nil, err
	}
	var qs []Query
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			qs = append(qs, Query{File: AlertsFile, Where: g.Name + "/" + r.Alert + r.Record, Expr: r.Expr})
		}
	}
	d, err := LoadDashboard()
	if err != nil {
		return nil, err
	}
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			qs = append(qs, Query{File: DashboardFile, Where: fmt.Sprintf("panel %q, target %s", p.Title, t.RefID), Expr: t.Expr})
		}
	}
	return qs, nil
}

// grafanaVars are the values given to Grafana's built-in variables (any
// duration does) and to the dashboard's own (downstream: a destination's
// name, for the row repeated per destination) before an expression is
// parsed.
var grafanaVars = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"downstream":      "crm",
}

var grafanaVar = regexp.MustCompile(`\$(\w+)|\$\{(\w+)\}`)

// Parse parses expr as PromQL, Grafana's built-in interval variables
// replaced by durations; any other variable is an error.
func Parse(expr string) (parser.Expr, error) {
	var unknown string
	expanded := grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVar.FindStringSubmatch(v)
		name := m[1] + m[2]
		if val, ok := grafanaVars[name]; ok {
			return val
		}
		unknown = v
		return v
	})
	if unknown != "" {
		return nil, fmt.Errorf("unknown variable %s in %q", unknown, expr)
	}
	return parser.NewParser(parser.Options{}).ParseExpr(expanded)
}

// MetricNames parses expr (see Parse) and returns the metric names its
// selectors name, sorted, without repeats. A selector without a metric name
// (`{job="x"}`) or with a name matched by a regular expression is an error:
// the tests could not tell which metric it needs.
func MetricNames(expr string) ([]string, error) {
	e, err := Parse(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, sel := range parser.ExtractSelectors(e) {
		name := ""
		for _, m := range sel {
			if m.Name != model.MetricNameLabel {
				continue
			}
			if m.Type != labels.MatchEqual {
				return nil, fmt.Errorf("%q: the metric name is matched by %s, not named", expr, m)
			}
			name = m.Value
		}
		if name == "" {
			return nil, fmt.Errorf("%q: a selector names no metric", expr)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
