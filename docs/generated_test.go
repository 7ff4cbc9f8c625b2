package docs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leadintake/leadintake/deploy"
	"github.com/leadintake/leadintake/internal/docsgen"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/openapi"
	"github.com/leadintake/leadintake/response"
)

// bins builds the binaries once for the tests that run their -h.
var bins = sync.OnceValues(func() (*system.Binaries, error) {
	dir, err := os.MkdirTemp("", "leadintake-docs-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return system.Build(ctx, dir, nil)
})

func TestMain(m *testing.M) {
	code := m.Run()
	if b, err := bins(); err == nil {
		os.RemoveAll(b.Dir)
	}
	os.Exit(code)
}

// help runs a binary with args (its -h) in an empty environment and
// returns its standard output.
func help(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := bins()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b.Path(name), args...)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}

// envRow is one variable of a binary's -h table.
type envRow struct {
	key, typ, def, desc string
	required            bool
}

// envTable reads the table of the environment that service.Usage prints:
// its header's columns give each cell's place.
func envTable(t *testing.T, out string) []envRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	h := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "KEY ") && strings.Contains(l, " DESCRIPTION") {
			h = i
			break
		}
	}
	if h < 0 {
		t.Fatalf("no table of the environment in:\n%s", out)
	}
	cols := []int{}
	for _, name := range []string{"KEY", "TYPE", "DEFAULT", "REQUIRED", "DESCRIPTION"} {
		i := strings.Index(lines[h], name)
		if i < 0 {
			t.Fatalf("the table's header %q has no %s", lines[h], name)
		}
		cols = append(cols, i)
	}
	cell := func(l string, k int) string {
		if cols[k] >= len(l) {
			return ""
		}
		end := len(l)
		if k+1 < len(cols) {
			end = min(cols[k+1], len(l))
		}
		return strings.TrimSpace(l[cols[k]:end])
	}
	var rows []envRow
	for _, l := range lines[h+1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		rows = append(rows, envRow{key: cell(l, 0), typ: cell(l, 1), def: cell(l, 2), required: cell(l, 3) == "true", desc: cell(l, 4)})
	}
	return rows
}

// cellText escapes text for a Markdown table's cell: a | would end the
// cell, and a <word> would be taken for an HTML tag.
func cellText(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// typeNames shortens envconfig's type names.
var typeNames = map[string]string{
	"String": "string", "Duration": "duration", "Integer": "integer", "True or False": "boolean",
	"Comma-separated list of String": "list", "Unsigned Integer": "integer",
}

// The table of the environment in docs/configuration.md is the union of
// `api -h` and `worker -h`, with which binary reads each variable.
func TestGeneratedEnv(t *testing.T) {
	t.Parallel()
	api := envTable(t, help(t, "api", "-h"))
	worker := envTable(t, help(t, "worker", "-h"))
	if len(api) < 20 || len(worker) < 20 {
		t.Fatalf("read %d and %d variables of api and worker; the table's reader is broken", len(api), len(worker))
	}
	type both struct{ api, worker *envRow }
	var order []string
	rows := map[string]*both{}
	add := func(r envRow, isAPI bool) {
		b, ok := rows[r.key]
		if !ok {
			b = &both{}
			rows[r.key] = b
			order = append(order, r.key)
		}
		if isAPI {
			b.api = &r
		} else {
			b.worker = &r
		}
	}
	for _, r := range api {
		add(r, true)
	}
	for _, r := range worker {
		add(r, false)
	}
	def := func(r *envRow) string {
		switch {
		case r.required:
			return "(required)"
		case r.def == "":
			return "unset"
		default:
			return "`" + r.def + "`"
		}
	}
	var b strings.Builder
	b.WriteString("| variable | read by | type | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, key := range order {
		r := rows[key]
		readBy, typ, dflt, desc := "", "", "", ""
		switch {
		case r.api != nil && r.worker != nil:
			readBy, typ = "both", typeNames[r.api.typ]
			if d1, d2 := def(r.api), def(r.worker); d1 == d2 {
				dflt = d1
			} else {
				dflt = "api " + d1 + ", worker " + d2
			}
			if r.api.desc == r.worker.desc {
				desc = r.api.desc
			} else {
				desc = "api: " + r.api.desc + "; worker: " + r.worker.desc
			}
		case r.api != nil:
			readBy, typ, dflt, desc = "api", typeNames[r.api.typ], def(r.api), r.api.desc
		default:
			readBy, typ, dflt, desc = "worker", typeNames[r.worker.typ], def(r.worker), r.worker.desc
		}
		if typ == "" {
			t.Errorf("%s: envconfig's type %q has no short name here", key, r.api.typ)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", key, readBy, typ, cellText(dflt), cellText(desc))
	}
	docsgen.Check(t, filepath.Join(root, "docs", "configuration.md"), "env", b.String(), *update)
}

// docs/commands.md shows `api -h` as it is, up to its table of the
// environment.
func TestGeneratedAPIHelp(t *testing.T) {
	t.Parallel()
	out := help(t, "api", "-h")
	usage, _, ok := strings.Cut(out, "\nEnvironment")
	if !ok {
		t.Fatalf("api -h has no Environment:\n%s", out)
	}
	docsgen.Check(t, filepath.Join(root, "docs", "commands.md"), "help-api", "```text\n"+strings.TrimRight(usage, "\n")+"\n```", *update)
}

// docs/retry-contract.md shows `leadintake -h` as it is.
func TestGeneratedCLIHelp(t *testing.T) {
	t.Parallel()
	out := help(t, "leadintake", "-h")
	if !strings.Contains(out, "leadintake submit") {
		t.Fatalf("leadintake -h:\n%s", out)
	}
	docsgen.Check(t, filepath.Join(root, "docs", "retry-contract.md"), "help-leadintake", "```text\n"+strings.TrimRight(out, "\n")+"\n```", *update)
}

// alertComments reads the comment above each rule of the alerting rules:
// what the rule means, in the words of the file.
func alertComments(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", deploy.AlertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "alert" {
					out[n.Content[i+1].Value] = commentText(n.Content[i].HeadComment + "\n" + n.HeadComment)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	return out
}

// commentText turns YAML comment lines into one sentence: the last
// paragraph, without the #s (a section's banner, "# --- Keys ---", is the
// paragraph before).
func commentText(c string) string {
	var paras [][]string
	cur := []string{}
	for _, l := range strings.Split(c, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "# ---") {
			if len(cur) > 0 {
				paras = append(paras, cur)
				cur = []string{}
			}
			continue
		}
		cur = append(cur, strings.TrimSpace(strings.TrimPrefix(l, "#")))
	}
	if len(cur) > 0 {
		paras = append(paras, cur)
	}
	if len(paras) == 0 {
		return ""
	}
	return strings.Join(paras[len(paras)-1], " ")
}

// runbookBase is where every alert's runbook_url points: a section of
// docs/monitoring.md, as GitHub shows it.
const runbookBase = "https://github.com/leadintake/leadintake/blob/main/docs/monitoring.md#"

// The table of alerts in docs/monitoring.md is the rules of
// deploy/prometheus/alerts.yml, each with its runbook.
func TestGeneratedAlerts(t *testing.T) {
	t.Parallel()
	rf, err := deploy.Alerts()
	if err != nil {
		t.Fatal(err)
	}
	comments := alertComments(t)
	var b strings.Builder
	b.WriteString("| alert | severity | for | fires when |\n| --- | --- | --- | --- |\n")
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			when := comments[r.Alert]
			if when == "" {
				t.Errorf("%s: no comment above the rule says what it means", r.Alert)
			}
			forText := r.For
			if forText == "" {
				forText = "at once"
			}
			fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s |\n", r.Alert, Slug(r.Alert), r.Labels["severity"], forText, cellText(when))
		}
	}
	if n < 10 {
		t.Fatalf("read %d alerts", n)
	}
	docsgen.Check(t, filepath.Join(root, "docs", "monitoring.md"), "alerts", b.String(), *update)
}

// Every alert has a runbook_url, the section of docs/monitoring.md named
// after it, and that section is there; every runbook is an alert's.
func TestRunbooks(t *testing.T) {
	t.Parallel()
	rf, err := deploy.Alerts()
	if err != nil {
		t.Fatal(err)
	}
	mon := pageAt(loadPages(t), "docs/monitoring.md")
	if mon == nil {
		t.Fatal("no docs/monitoring.md")
	}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[Slug(r.Alert)] = true
			want := runbookBase + Slug(r.Alert)
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !mon.anchors[Slug(r.Alert)] {
				t.Errorf("%s: docs/monitoring.md has no section ### %s", r.Alert, r.Alert)
			}
		}
	}
	for a := range mon.anchors {
		if strings.HasPrefix(a, "leadintake") && !alerts[a] {
			t.Errorf("docs/monitoring.md: runbook #%s is no alert's", a)
		}
	}
}

// codeRow matches a row of the error codes' table: code, statuses, meaning.
var codeRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| ([0-9, ]+) \\| (.*) \\|$")

// The table of error codes in docs/retry-contract.md is the one the
// OpenAPI document gives ErrorCode (which its own test holds to package
// response), and each status is the one package response answers with.
func TestGeneratedErrorCodes(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Description string   `json:"description"`
				Enum        []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	schema, ok := doc.Components.Schemas["ErrorCode"]
	if !ok {
		t.Fatal("openapi.json has no ErrorCode")
	}
	var table []string
	rows := 0
	for _, l := range strings.Split(schema.Description, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		table = append(table, l)
		m := codeRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		rows++
		status := response.Code(m[1]).Status()
		if !strings.Contains(m[2], strconv.Itoa(status)) {
			t.Errorf("%s: the table says %s; package response answers %d", m[1], m[2], status)
		}
	}
	if rows != len(schema.Enum) {
		t.Errorf("the table has %d codes, ErrorCode's enum %d", rows, len(schema.Enum))
	}
	docsgen.Check(t, filepath.Join(root, "docs", "retry-contract.md"), "error-codes", strings.Join(table, "\n"), *update)
}
