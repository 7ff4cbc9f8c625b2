package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/leadintake/leadintake/deploy"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/docsgen"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/webhook"
)

// updateDocs makes the docs' tests write what real processes show instead
// of comparing (make docs).
var updateDocs = flag.Bool("update", false, "write the docs' metrics table and quick start output instead of checking them")

// The metrics table of docs/monitoring.md is what a real api and worker
// export, once a lead went through them: every leadintake_ family, its
// type, its labels, which process exports it, and its help.
func TestDocsMetrics(t *testing.T) {
	t.Parallel()
	queries, err := deploy.Queries()
	if err != nil {
		t.Fatal(err)
	}
	onDashboard := map[string]bool{}
	for _, q := range queries {
		if q.File != deploy.DashboardFile {
			continue
		}
		names, err := deploy.MetricNames(q.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suffix)
			}
			onDashboard[n] = true
		}
	}

	s := newStack(t, nil)
	api := s.startAPI()
	worker := s.startWorker()
	const key = "docs-metrics-key-0001"
	if r := s.submit(key, leadBody(11)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	s.waitState(key, time.Minute, "completed")
	urls := map[string]string{"api": adminURL(t, api) + "/metrics", "worker": adminURL(t, worker) + "/metrics"}

	// name -> process -> family; the families that appear only once
	// something happened are waited for: those the dashboard shows.
	var byName map[string]map[string]*dto.MetricFamily
	testkit.EventuallyWithin(t, time.Minute, "every metric of the dashboard is exported", func() bool {
		byName = map[string]map[string]*dto.MetricFamily{}
		for proc, u := range urls {
			for name, fam := range scrape(t, u, basicAuth{}) {
				if !strings.HasPrefix(name, "leadintake_") {
					continue
				}
				if byName[name] == nil {
					byName[name] = map[string]*dto.MetricFamily{}
				}
				byName[name][proc] = fam
			}
		}
		for n := range onDashboard {
			if strings.HasPrefix(n, "leadintake_") && byName[n] == nil {
				return false
			}
		}
		return true
	})

	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("| metric | type | labels | exported by | what it counts |\n| --- | --- | --- | --- | --- |\n")
	for _, n := range names {
		procs := []string{}
		var fam *dto.MetricFamily
		labels := map[string]bool{}
		for _, proc := range []string{"api", "worker"} {
			f, ok := byName[n][proc]
			if !ok {
				continue
			}
			procs = append(procs, proc)
			if fam != nil && (fam.GetHelp() != f.GetHelp() || fam.GetType() != f.GetType()) {
				t.Errorf("%s: the api and the worker export it with different help or types", n)
			}
			fam = f
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = true
				}
			}
		}
		ls := make([]string, 0, len(labels))
		for l := range labels {
			ls = append(ls, "`"+l+"`")
		}
		slices.Sort(ls)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", n, strings.ToLower(fam.GetType().String()),
			strings.Join(ls, ", "), strings.Join(procs, ", "), strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(fam.GetHelp()))
	}
	docsgen.Check(t, filepath.Join("..", "docs", "monitoring.md"), "metrics", b.String(), *updateDocs)
}

// The demo client of `make run` (scripts/run.sh), for the quick start.
const (
	demoToken          = "demo-token-change-me"
	demoPublishableKey = "pk_demo_local_0123456789abcdef"
	demoCallbackSecret = "whsec_ZGVtby1jYWxsYmFjay1zZWNyZXQtY2hhbmdlLW1l"
	demoWebhookSecret  = "whsec_ZGVtby13ZWJob29rLXNlY3JldC1jaGFuZ2UtbWU="
)

// The quick start's shell blocks run against a real api, worker and fake
// downstream set up as `make run` sets them up (its default CRM, http, its
// owners; its Slack and e-mail channels left out: the blocks show none of
// what they receive), and print what the docs show (ids, times and
// lengths aside).
func TestDocsQuickstart(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"README.md", "docs/getting-started.md"} {
		t.Run(filepath.Base(doc), func(t *testing.T) {
			t.Parallel()
			runQuickstart(t, filepath.Join("..", filepath.FromSlash(doc)))
		})
	}
}

func runQuickstart(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docsgen.Quickstart(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no quick start block", path)
	}
	secret, err := webhook.ParseSecret(demoCallbackSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, &stackOpts{fake: &fake.Options{CallbackSecret: secret}})
	fakeURL, err := url.Parse(s.fakeURL)
	if err != nil {
		t.Fatal(err)
	}
	clients := filepath.Join(t.TempDir(), "clients.yaml")
	file := fmt.Sprintf(`clients:
  - id: demo
    tokens_sha256: [%s]
    publishable_keys:
      - key: %s
        origins: [http://127.0.0.1:8090, http://localhost:8090]
        spam: {}
    callback:
      url: %s/callbacks/demo
      secret: %s
    webhook_secret: %s
    owners:
      - name: alice
        email: alice@example.com
      - name: bob
        email: bob@example.com
    assign:
      - pool: [alice, bob]
`, sha256Hex(demoToken), demoPublishableKey, s.fakeURL, demoCallbackSecret, demoWebhookSecret)
	if err := os.WriteFile(clients, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.startAPI("CLIENTS_FILE=" + clients)
	s.startWorker("CLIENTS_FILE=" + clients)
	apiURL, err := url.Parse(s.apiURL)
	if err != nil {
		t.Fatal(err)
	}
	// The docs' addresses are make run's.
	toTest := strings.NewReplacer("127.0.0.1:8080", apiURL.Host, "127.0.0.1:9090", fakeURL.Host)
	toDocs := strings.NewReplacer(apiURL.Host, "127.0.0.1:8080", fakeURL.Host, "127.0.0.1:9090")

	outputs := make([]string, len(blocks))
	for i, b := range blocks {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", toTest.Replace(b.Command))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s:%d: the block fails: %v\n%s", path, b.Line, err, stderr.String())
		}
		outputs[i] = toDocs.Replace(string(out))
		got, want := docsgen.NormalizeOutput(outputs[i]), docsgen.NormalizeOutput(b.Output)
		if got == want {
			// The docs keep their own ids and times.
			outputs[i] = b.Output
			continue
		}
		if !*updateDocs {
			t.Errorf("%s:%d: the block prints what the docs do not show (make docs writes it):\n%s\n--- it prints:\n%s",
				path, b.Line, docsgen.FirstDifference(want, got), outputs[i])
		}
	}
	if *updateDocs {
		out, err := docsgen.ReplaceOutputs(raw, blocks, outputs)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != string(raw) {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the quick start's output written", path)
		}
	}
}
