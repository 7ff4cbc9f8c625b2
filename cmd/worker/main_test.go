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
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The worker runs in-process: run works until its context ends, then stops
// cleanly.
func TestRunWorksUntilCancelled(t *testing.T) {
	t.Parallel()
	dbURL, _ := dbtest.New(t)
	env := service.MapEnv(map[string]string{
		"DATABASE_URL": dbURL, "ADMIN_ADDR": "127.0.0.1:0", "SIMULATE_DOWNSTREAM": "true", "SHUTDOWN_TIMEOUT": "5s",
		"PII_HASH_KEY": "cmd-worker-test-pii-hash-key-0123456789",
	})
	ctx, cancel := context.WithCancel(t.Context())
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker"}, env, w, io.Discard)
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

func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	base := func(extra map[string]string) map[string]string {
		m := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "SIMULATE_DOWNSTREAM": "true",
			"PII_HASH_KEY": "cmd-worker-test-pii-hash-key-0123456789"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"RescueTooSoon", base(map[string]string{"JOB_TIMEOUT": "30s", "RESCUE_STUCK_AFTER": "35s"}), "RESCUE_STUCK_AFTER"},
		{"UnknownMode", base(map[string]string{"CRM_MODE": "merge"}), "CRM_MODE"},
		{"URLsWithoutSimulation", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "PII_HASH_KEY": "cmd-worker-test-pii-hash-key-0123456789"}, "ENRICHMENT_URL"},
		{"ShortHashKey", base(map[string]string{"PII_HASH_KEY": "short"}), "PII_HASH_KEY"},
		{"LeadRetentionBelowKeyRetention", base(map[string]string{"KEY_RETENTION": "168h", "LEAD_RETENTION": "24h"}), "LEAD_RETENTION"},
		{"RelativeURL", base(map[string]string{"SIMULATE_DOWNSTREAM": "false", "ENRICHMENT_URL": "/e", "CRM_URL": "http://x/c", "NOTIFY_URL": "http://x/n"}), "ENRICHMENT_URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), []string{"worker"}, service.MapEnv(tt.env), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
