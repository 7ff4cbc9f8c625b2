package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

const testPIIHashKey = "cmd-api-test-pii-hash-key-0123456789"

// listenAddrs reads the log lines of a process until the one named msg, and
// returns its addr and admin_addr.
func listenAddrs(t *testing.T, logs io.Reader, msg string) (string, string) {
	t.Helper()
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			addr, _ := line["addr"].(string)
			admin, _ := line["admin_addr"].(string)
			return addr, admin
		}
	}
	t.Fatalf("no %q line in the log", msg)
	return "", ""
}

// The api runs in-process: run serves until its context ends, then stops
// cleanly.
func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	dbURL, _ := dbtest.New(t)
	sum := sha256.Sum256([]byte("in-process-token"))
	env := service.MapEnv(map[string]string{
		"DATABASE_URL": dbURL, "API_ADDR": "127.0.0.1:0", "ADMIN_ADDR": "127.0.0.1:0",
		"API_CLIENTS": "local=" + hex.EncodeToString(sum[:]), "SHUTDOWN_TIMEOUT": "5s",
		"PII_HASH_KEY": testPIIHashKey,
	})
	ctx, cancel := context.WithCancel(t.Context())
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"api"}, env, w, io.Discard)
		w.Close()
	}()
	addr, admin := listenAddrs(t, logs, "api listening")
	go func() { _, _ = io.Copy(io.Discard, logs) }()

	client := &http.Client{Timeout: testkit.Patience}
	res, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %d", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/leads",
		strings.NewReader(`{"email":"ada@example.com","source":"website"}`))
	req.Header.Set("Authorization", "Bearer in-process-token")
	req.Header.Set("Idempotency-Key", testkit.NewKey())
	req.Header.Set("Content-Type", "application/json")
	res, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/leads: %d", res.StatusCode)
	}
	res, err = client.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", res.StatusCode)
	}

	// A connection the client dialed and never used is idle to the
	// server's graceful shutdown only after Go's 5 s (it may still bring a
	// request): a polite client closes its idle connections first.
	client.CloseIdleConnections()
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
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"MissingDatabase", map[string]string{"API_CLIENTS": "a=" + strings.Repeat("0", 64)}, "DATABASE_URL is required"},
		{"BadDuration", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "PII_HASH_KEY": testPIIHashKey, "API_CLIENTS": "a=" + strings.Repeat("0", 64), "REQUEST_TIMEOUT": "soon"}, "REQUEST_TIMEOUT: not a valid Duration"},
		{"EmptyLogLevel", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "PII_HASH_KEY": testPIIHashKey, "API_CLIENTS": "a=" + strings.Repeat("0", 64), "LOG_LEVEL": ""}, "LOG_LEVEL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), []string{"api"}, service.MapEnv(tt.env), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// ALLOWED_SOURCES set to nothing allows any source; unset, it takes the
// default list.
func TestAllowedSources(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "PII_HASH_KEY": testPIIHashKey, "API_CLIENTS": "a=" + strings.Repeat("0", 64)}
	var cfg config
	if err := service.Config(service.MapEnv(base), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(nonEmpty(cfg.AllowedSources)) != 5 {
		t.Fatalf("unset: %q, want the default five", cfg.AllowedSources)
	}
	base["ALLOWED_SOURCES"] = ""
	cfg = config{}
	if err := service.Config(service.MapEnv(base), &cfg); err != nil {
		t.Fatal(err)
	}
	if got := nonEmpty(cfg.AllowedSources); len(got) != 0 {
		t.Fatalf("set to nothing: %q, want none (any source)", got)
	}
}
