package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
)

// contractVars are the contract's variables of each binary, with their
// defaults ("" for none); required ones are marked so in the usage table.
var contractVars = map[string]map[string]string{
	"api": {
		"DATABASE_URL":      "",
		"API_ADDR":          ":8080",
		"ADMIN_ADDR":        "127.0.0.1:8081",
		"ADMIN_USER":        "",
		"ADMIN_PASSWORD":    "",
		"METRICS_USER":      "",
		"METRICS_PASSWORD":  "",
		"API_CLIENTS":       "",
		"ALLOWED_SOURCES":   "website,linkedin,referral,ads,event",
		"MAX_BODY_BYTES":    "65536",
		"REQUEST_TIMEOUT":   "5s",
		"JOB_MAX_ATTEMPTS":  "12",
		"SHUTDOWN_TIMEOUT":  "30s",
		"CLIENTS_FILE":      "",
		"MAX_WAIT":          "30s",
		"PUBLIC_RATE_LIMIT": "20/m",
		"TRUSTED_PROXIES":   "",
		"PII_HASH_KEY":      "",
		"KEY_RETENTION":     "168h",
		"LEAD_RETENTION":    "720h",
		"LOG_FORMAT":        "json",
		"LOG_LEVEL":         "info",
	},
	"worker": {
		"DATABASE_URL":        "",
		"ADMIN_ADDR":          "127.0.0.1:8082",
		"ADMIN_USER":          "",
		"ADMIN_PASSWORD":      "",
		"METRICS_USER":        "",
		"METRICS_PASSWORD":    "",
		"KEY_RETENTION":       "168h",
		"CLEANUP_INTERVAL":    "1h",
		"RECONCILE_INTERVAL":  "1m",
		"ENRICHMENT_URL":      "",
		"CRM_URL":             "",
		"NOTIFY_URL":          "",
		"ENRICHMENT_TOKEN":    "",
		"CRM_TOKEN":           "",
		"NOTIFY_TOKEN":        "",
		"CRM_MODE":            "upsert",
		"DOWNSTREAM_TIMEOUT":  "10s",
		"JOB_MAX_ATTEMPTS":    "12",
		"RETRY_BASE_DELAY":    "1s",
		"RETRY_MAX_DELAY":     "10m",
		"JOB_TIMEOUT":         "60s",
		"RESCUE_STUCK_AFTER":  "5m",
		"SHUTDOWN_TIMEOUT":    "30s",
		"SIMULATE_DOWNSTREAM": "false",
		"CLIENTS_FILE":        "",
		"CALLBACK_MAX_AGE":    "24h",
		"PII_HASH_KEY":        "",
		"LEAD_RETENTION":      "720h",
		"WORKER_CONCURRENCY":  "100",
		"LOG_FORMAT":          "json",
		"LOG_LEVEL":           "info",
	},
}

// contractRequired are the variables a binary cannot start without.
// (API_CLIENTS is required unless CLIENTS_FILE is set: the usage table
// cannot say so, and the description does.)
var contractRequired = map[string][]string{
	"api":    {"DATABASE_URL", "PII_HASH_KEY"},
	"worker": {"DATABASE_URL", "PII_HASH_KEY"},
}

// usageVar is one row of envconfig's usage table.
type usageVar struct {
	Type     string // as envconfig names it: String, Duration, Integer, True or False...
	Default  string
	Required bool
}

// parseUsage reads the table of variables that `-h` prints (envconfig's
// DefaultTableFormat: KEY TYPE DEFAULT REQUIRED DESCRIPTION, aligned in
// columns).
func parseUsage(t *testing.T, out string) map[string]usageVar {
	t.Helper()
	lines := strings.Split(out, "\n")
	head := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "KEY ") && strings.Contains(l, " DEFAULT ") && strings.Contains(l, " REQUIRED ") {
			head = i
			break
		}
	}
	if head < 0 {
		t.Fatalf("no table of variables (KEY TYPE DEFAULT REQUIRED DESCRIPTION) in:\n%s", out)
	}
	h := lines[head]
	typeAt, defaultAt, requiredAt, descAt := strings.Index(h, " TYPE ")+1, strings.Index(h, " DEFAULT ")+1, strings.Index(h, " REQUIRED ")+1, strings.Index(h, " DESCRIPTION")+1
	vars := map[string]usageVar{}
	for _, l := range lines[head+1:] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(l) < descAt {
			t.Fatalf("usage row shorter than the table: %q", l)
		}
		name := strings.Fields(l)[0]
		vars[name] = usageVar{
			Type:     strings.TrimSpace(l[typeAt:defaultAt]),
			Default:  strings.TrimSpace(l[defaultAt:requiredAt]),
			Required: strings.TrimSpace(l[requiredAt:descAt]) == "true",
		}
	}
	return vars
}

func TestHelpListsTheContractVariables(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"api", "worker"} {
		for _, flag := range []string{"-h", "--help"} {
			t.Run(bin+flag, func(t *testing.T) {
				t.Parallel()
				r := runBinary(t, bin, nil, flag)
				if r.code != 0 {
					t.Fatalf("%s %s: exit %d\nstdout:\n%s\nstderr:\n%s", bin, flag, r.code, r.stdout, r.stderr)
				}
				vars := parseUsage(t, r.stdout)
				for name, def := range contractVars[bin] {
					v, ok := vars[name]
					if !ok {
						t.Errorf("%s %s does not list %s", bin, flag, name)
						continue
					}
					if v.Default != def {
						t.Errorf("%s %s: %s default %q, want %q", bin, flag, name, v.Default, def)
					}
				}
				for _, name := range contractRequired[bin] {
					if !vars[name].Required {
						t.Errorf("%s %s: %s is not marked required", bin, flag, name)
					}
				}
			})
		}
	}
}

// Bad configuration: a non-zero exit and one line on stderr that names the
// variable, before anything is started (no database is reachable at the
// URL used, and nothing may wait for it).
func TestBadConfigurationExitsWithOneLine(t *testing.T) {
	t.Parallel()
	const db = "DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1 " + piiHashKey
	const clients = "API_CLIENTS=demo=2f6b4a8b5e0c7c2b1d9e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c"
	const urls = "ENRICHMENT_URL=http://127.0.0.1:1/enrichment CRM_URL=http://127.0.0.1:1/crm NOTIFY_URL=http://127.0.0.1:1/notify"
	cases := []struct {
		name string
		bin  string
		args []string
		env  string
		want string // the variable the line must name
	}{
		{"api/missing DATABASE_URL", "api", nil, clients, "DATABASE_URL"},
		{"api/missing API_CLIENTS", "api", nil, db, "API_CLIENTS"},
		{"api/missing CLIENTS_FILE", "api", nil, db + " CLIENTS_FILE=/nonexistent/clients.yaml", "CLIENTS_FILE"},
		{"api/malformed PUBLIC_RATE_LIMIT", "api", nil, db + " " + clients + " PUBLIC_RATE_LIMIT=lots", "PUBLIC_RATE_LIMIT"},
		{"api/malformed TRUSTED_PROXIES", "api", nil, db + " " + clients + " TRUSTED_PROXIES=10.0.0.0/33", "TRUSTED_PROXIES"},
		{"api/zero MAX_WAIT", "api", nil, db + " " + clients + " MAX_WAIT=0s", "MAX_WAIT"},
		{"api/malformed API_CLIENTS", "api", nil, db + " API_CLIENTS=demo:not-a-hash", "API_CLIENTS"},
		{"api/short token hash", "api", nil, db + " API_CLIENTS=demo=abc123", "API_CLIENTS"},
		{"api/malformed REQUEST_TIMEOUT", "api", nil, db + " " + clients + " REQUEST_TIMEOUT=abc", "REQUEST_TIMEOUT"},
		{"api/malformed SHUTDOWN_TIMEOUT", "api", nil, db + " " + clients + " SHUTDOWN_TIMEOUT=10", "SHUTDOWN_TIMEOUT"},
		{"api/negative MAX_BODY_BYTES", "api", nil, db + " " + clients + " MAX_BODY_BYTES=-1", "MAX_BODY_BYTES"},
		{"api/ADMIN_USER alone", "api", nil, db + " " + clients + " ADMIN_USER=operator", "ADMIN_PASSWORD"},
		{"api/METRICS_USER alone", "api", nil, db + " " + clients + " METRICS_USER=prometheus", "METRICS_PASSWORD"},
		{"worker/the scrape credential the admin one", "worker", nil, db + " " + urls + " ADMIN_USER=a ADMIN_PASSWORD=b METRICS_USER=a METRICS_PASSWORD=b", "METRICS_USER"},
		{"api/unknown LOG_LEVEL", "api", nil, db + " " + clients + " LOG_LEVEL=loud", "LOG_LEVEL"},
		{"api migrate/missing DATABASE_URL", "api", []string{"migrate"}, "", "DATABASE_URL"},
		{"api/missing PII_HASH_KEY", "api", nil, "DATABASE_URL=postgres://nobody@127.0.0.1:1/none " + clients, "PII_HASH_KEY"},
		{"api/short PII_HASH_KEY", "api", nil, db + " " + clients + " PII_HASH_KEY=short", "PII_HASH_KEY"},
		{"api/LEAD_RETENTION below KEY_RETENTION", "api", nil, db + " " + clients + " LEAD_RETENTION=1h", "LEAD_RETENTION"},
		{"api erase/missing PII_HASH_KEY", "api", []string{"erase", "--client", "demo", "--email", "ada@example.com"}, "DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "PII_HASH_KEY"},
		{"worker/missing DATABASE_URL", "worker", nil, urls, "DATABASE_URL"},
		{"worker/missing PII_HASH_KEY", "worker", nil, "DATABASE_URL=postgres://nobody@127.0.0.1:1/none " + urls, "PII_HASH_KEY"},
		{"worker/malformed JOB_TIMEOUT", "worker", nil, db + " " + urls + " JOB_TIMEOUT=abc", "JOB_TIMEOUT"},
		{"worker/malformed KEY_RETENTION", "worker", nil, db + " " + urls + " KEY_RETENTION=7d", "KEY_RETENTION"},
		{"worker/zero CLEANUP_INTERVAL", "worker", nil, db + " " + urls + " CLEANUP_INTERVAL=0s", "CLEANUP_INTERVAL"},
		{"worker/unknown CRM_MODE", "worker", nil, db + " " + urls + " CRM_MODE=merge", "CRM_MODE"},
		{"worker/missing CRM_URL", "worker", nil, db + " ENRICHMENT_URL=http://127.0.0.1:1/e NOTIFY_URL=http://127.0.0.1:1/n", "CRM_URL"},
		{"worker/malformed SIMULATE_DOWNSTREAM", "worker", nil, db + " " + urls + " SIMULATE_DOWNSTREAM=perhaps", "SIMULATE_DOWNSTREAM"},
		{"worker/RESCUE_STUCK_AFTER below JOB_TIMEOUT", "worker", nil, db + " " + urls + " RESCUE_STUCK_AFTER=10s", "RESCUE_STUCK_AFTER"},
		{"worker/malformed CRM_RATE_LIMIT", "worker", nil, db + " " + urls + " CRM_RATE_LIMIT=lots", "CRM_RATE_LIMIT"},
		{"worker/zero NOTIFY_RATE_LIMIT", "worker", nil, db + " " + urls + " NOTIFY_RATE_LIMIT=0/s", "NOTIFY_RATE_LIMIT"},
		{"worker/bad period of ENRICHMENT_RATE_LIMIT", "worker", nil, db + " " + urls + " ENRICHMENT_RATE_LIMIT=100/-10s", "ENRICHMENT_RATE_LIMIT"},
		{"worker/malformed PROBE_INTERVAL", "worker", nil, db + " " + urls + " PROBE_INTERVAL=often", "PROBE_INTERVAL"},
		{"worker/zero DELIVERY_MAX_AGE", "worker", nil, db + " " + urls + " DELIVERY_MAX_AGE=0s", "DELIVERY_MAX_AGE"},
		// A job rescued while its first run still writes would run twice.
		{"worker/RESCUE_STUCK_AFTER equal to JOB_TIMEOUT", "worker", nil, db + " " + urls + " JOB_TIMEOUT=60s RESCUE_STUCK_AFTER=60s", "RESCUE_STUCK_AFTER"},
		{"worker/RESCUE_STUCK_AFTER just past JOB_TIMEOUT", "worker", nil, db + " " + urls + " JOB_TIMEOUT=60s RESCUE_STUCK_AFTER=61s", "RESCUE_STUCK_AFTER"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := runBinary(t, tc.bin, strings.Fields(tc.env), tc.args...)
			if r.code == 0 {
				t.Fatalf("exit 0, want non-zero\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if len(lines) != 1 || lines[0] == "" {
				t.Fatalf("stderr has %d lines, want exactly one:\n%s", len(lines), r.stderr)
			}
			if !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr %q does not name %s", lines[0], tc.want)
			}
			if r.stdout != "" {
				t.Fatalf("stdout not empty on bad configuration:\n%s", r.stdout)
			}
			// Configuration is checked before anything is opened.
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("took %s to refuse the configuration", d)
			}
			t.Logf("%s", lines[0])
		})
	}
}

// `api migrate` on an empty database applies everything; run again, it has
// nothing to do and still exits 0.
func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.Empty(t)
	for i := 1; i <= 2; i++ {
		r := runBinary(t, "api", []string{"DATABASE_URL=" + dbURL}, "migrate")
		if r.code != 0 {
			t.Fatalf("api migrate, run %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "migrations applied") {
			t.Fatalf("api migrate, run %d: no \"migrations applied\" line:\n%s", i, r.stdout)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, table := range []string{"idempotency_keys", "leads", "river_job", "river_queue", "river_leader"} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			t.Errorf("no table %s after api migrate", table)
		}
	}
}

// A configuration error names the variable, never the secret it holds: a
// token pasted where a hash belongs, a list of hashes, a password.
func TestConfigErrorsShowNoSecret(t *testing.T) {
	t.Parallel()
	const db = "DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	const hash = "2f6b4a8b5e0c7c2b1d9e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c"
	cases := []struct {
		name, bin string
		env       []string
		secrets   []string
		want      string
	}{
		{"raw token in API_CLIENTS", "api", []string{db, "API_CLIENTS=raw-token-Zq81xVb0"}, []string{"raw-token-Zq81xVb0"}, "API_CLIENTS"},
		{"token as hash", "api", []string{db, "API_CLIENTS=demo=Tok3n-Pasted-By-Mistake"}, []string{"Tok3n-Pasted-By-Mistake"}, "API_CLIENTS"},
		{"hash list with a bad entry", "api", []string{db, "API_CLIENTS=a=" + hash + ",b:" + hash}, []string{hash}, "API_CLIENTS"},
		{"password in a malformed URL", "api", []string{"DATABASE_URL=postgres://u:Pw-s3cret@127.0.0.1:notaport/db", "API_CLIENTS=a=" + hash}, []string{"Pw-s3cret"}, "DATABASE_URL"},
		{"admin password alone", "worker", []string{db, "SIMULATE_DOWNSTREAM=true", "ADMIN_PASSWORD=Adm1n-pw-xyz"}, []string{"Adm1n-pw-xyz"}, "ADMIN_USER"},
		{"metrics password alone", "api", []string{db, "API_CLIENTS=a=" + hash, "METRICS_PASSWORD=Scr4pe-pw-xyz"}, []string{"Scr4pe-pw-xyz"}, "METRICS_USER"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, tc.bin, append(tc.env, piiHashKey))
			if r.code == 0 {
				t.Fatalf("exit 0, want non-zero\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not name %s", r.stderr, tc.want)
			}
			for _, s := range tc.secrets {
				if strings.Contains(r.stderr+r.stdout, s) {
					t.Errorf("the output shows the secret %q:\n%s%s", s, r.stdout, r.stderr)
				}
			}
		})
	}
}

// A malformed OTEL_EXPORTER_OTLP_*HEADERS (it often holds a collector's API
// key) is a configuration error of one line that names the variable and
// shows no part of the value, in either binary: the OpenTelemetry
// exporters would report it themselves, quoting it. Each process would
// otherwise stop later (a listener it cannot open), once the exporters
// had read the headers.
func TestOTLPHeadersErrorsShowNoSecret(t *testing.T) {
	t.Parallel()
	const db = "DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	const clients = "API_CLIENTS=demo=2f6b4a8b5e0c7c2b1d9e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c"
	const endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1"
	cases := []struct {
		name, bin string
		env       []string
		secret    string
		want      string
	}{
		{"no '='", "api", []string{db, clients, endpoint, "API_ADDR=256.0.0.1:80", "OTEL_EXPORTER_OTLP_HEADERS=Authorization: Bearer Otlp-K3y-Zq81"},
			"Otlp-K3y-Zq81", "OTEL_EXPORTER_OTLP_HEADERS"},
		{"malformed escape", "worker", []string{db, "SIMULATE_DOWNSTREAM=true", endpoint, "ADMIN_ADDR=256.0.0.1:80", "OTEL_EXPORTER_OTLP_TRACES_HEADERS=api-key=Otlp%K3y-Zq82"},
			"K3y-Zq82", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		{"second entry", "api", []string{db, clients, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://127.0.0.1:1/v1/metrics", "API_ADDR=256.0.0.1:80",
			"OTEL_EXPORTER_OTLP_METRICS_HEADERS=x-tenant=sales,Otlp-K3y-Zq83"}, "Otlp-K3y-Zq83", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"},
		{"control character", "worker", []string{db, "SIMULATE_DOWNSTREAM=true", endpoint, "ADMIN_ADDR=256.0.0.1:80", "OTEL_EXPORTER_OTLP_HEADERS=api-key=Otlp-K3y-Zq84%0D%0AX-Evil: 1"},
			"K3y-Zq84", "OTEL_EXPORTER_OTLP_HEADERS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, tc.bin, append(tc.env, piiHashKey))
			if r.code == 0 {
				t.Fatalf("exit 0, want non-zero\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, tc.secret) {
				t.Errorf("the output shows the secret %q:\n%s%s", tc.secret, r.stdout, r.stderr)
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr %q: want one line naming %s", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on bad configuration:\n%s", r.stdout)
			}
		})
	}
}
