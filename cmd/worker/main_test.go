package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
)

// The test binary is also the worker, for the tests that run it as a
// process with an environment of its own.
func TestMain(m *testing.M) { testkit.MainOrProgram(m, main) }

// The worker runs in-process: run works until its context ends, then stops
// cleanly. (It reads the process's environment: the test is not parallel.)
func TestRunWorksUntilCancelled(t *testing.T) {
	dbURL, _ := dbtest.New(t)
	testkit.Environment(t, map[string]string{
		"DATABASE_URL": dbURL, "ADMIN_ADDR": "127.0.0.1:0", "SIMULATE_DOWNSTREAM": "true", "SHUTDOWN_TIMEOUT": "5s",
		"PII_HASH_KEY": "cmd-worker-test-pii-hash-key-0123456789",
	})
	ctx, cancel := context.WithCancel(t.Context())
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker"}, w, io.Discard)
		w.Close()
	}()
	var admin string
	sc := bufio.NewScanner(logs)
	for admin == "" && sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "worker started" {
			admin, _ = line["admin_addr"].(string)
		}
	}
	if admin == "" {
		t.Fatal("no \"worker started\" line")
	}
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	res, err := (&http.Client{Timeout: testkit.Patience}).Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "leadintake_leads_finished_total") {
		t.Fatalf("GET /metrics: %d without the worker's metrics", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after its context ended: %v", err)
		}
	case <-time.After(testkit.Patience):
		t.Fatal("run did not return after its context ended")
	}
}

// Bad configuration: the worker, run as a process with an environment of
// its own, exits 1 with one line naming the variable.
func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	base := func(extra ...string) []string {
		return append([]string{"DATABASE_URL=postgres://x@127.0.0.1:1/x", "SIMULATE_DOWNSTREAM=true",
			"PII_HASH_KEY=cmd-worker-test-pii-hash-key-0123456789"}, extra...)
	}
	for _, tt := range []struct {
		name string
		env  []string
		want string
	}{
		{"RescueTooSoon", base("JOB_TIMEOUT=30s", "RESCUE_STUCK_AFTER=35s"), "RESCUE_STUCK_AFTER"},
		{"UnknownMode", base("CRM_MODE=merge"), "CRM_MODE"},
		{"URLsWithoutSimulation", []string{"DATABASE_URL=postgres://x@127.0.0.1:1/x", "PII_HASH_KEY=cmd-worker-test-pii-hash-key-0123456789"}, "ENRICHMENT_URL"},
		{"ShortHashKey", base("PII_HASH_KEY=short"), "PII_HASH_KEY"},
		{"MissingHashKey", []string{"DATABASE_URL=postgres://x@127.0.0.1:1/x", "SIMULATE_DOWNSTREAM=true"}, "PII_HASH_KEY is required"},
		{"LeadRetentionBelowKeyRetention", base("KEY_RETENTION=168h", "LEAD_RETENTION=24h"), "LEAD_RETENTION"},
		{"ZeroKeyRetention", base("KEY_RETENTION=0s"), "KEY_RETENTION must be positive"},
		{"RelativeURL", base("SIMULATE_DOWNSTREAM=false", "ENRICHMENT_URL=/e", "CRM_URL=http://x/c", "NOTIFY_URL=http://x/n"), "ENRICHMENT_URL"},
		{"EmptyBool", base("SIMULATE_DOWNSTREAM="), "SIMULATE_DOWNSTREAM is set but empty"},
		{"EmptyAdminAddr", base("ADMIN_ADDR="), "ADMIN_ADDR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := testkit.RunProgram(t, tt.env)
			line := strings.TrimSuffix(r.Stderr, "\n")
			if r.Code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line naming %s", r.Code, r.Stderr, tt.want)
			}
		})
	}
}
