package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/internal/testkit"
)

// The test binary is also the api, for the tests that run it as a process
// with an environment of its own.
func TestMain(m *testing.M) { testkit.MainOrProgram(m, main) }

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
// cleanly. (It reads the process's environment: the test is not parallel.)
func TestRunServesUntilCancelled(t *testing.T) {
	dbURL, _ := dbtest.New(t)
	sum := sha256.Sum256([]byte("in-process-token"))
	testkit.Environment(t, map[string]string{
		"DATABASE_URL": dbURL, "API_ADDR": "127.0.0.1:0", "ADMIN_ADDR": "127.0.0.1:0",
		"API_CLIENTS": "local=" + hex.EncodeToString(sum[:]), "SHUTDOWN_TIMEOUT": "5s",
		"PII_HASH_KEY": testPIIHashKey,
	})
	ctx, cancel := context.WithCancel(t.Context())
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"api"}, w, io.Discard)
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

// Bad configuration: the api, run as a process with an environment of its
// own, exits 1 with one line naming the variable, and never its value.
func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	const (
		db      = "DATABASE_URL=postgres://x@127.0.0.1:1/x"
		key     = "PII_HASH_KEY=" + testPIIHashKey
		clients = "API_CLIENTS=a=0000000000000000000000000000000000000000000000000000000000000000"
	)
	for _, tt := range []struct {
		name string
		env  []string
		want string
		// secret must not be shown.
		secret string
	}{
		{"MissingDatabase", []string{key, clients}, "DATABASE_URL is required", ""},
		{"EmptyDatabase", []string{"DATABASE_URL=", key, clients}, "DATABASE_URL is required, and is set but empty", ""},
		{"BadDuration", []string{db, key, clients, "REQUEST_TIMEOUT=soon"}, "REQUEST_TIMEOUT: not a valid Duration", "soon"},
		{"EmptyDuration", []string{db, key, clients, "REQUEST_TIMEOUT="}, "REQUEST_TIMEOUT is set but empty", ""},
		{"BadInteger", []string{db, key, clients, "MAX_BODY_BYTES=s3cr3t-Zq81"}, "MAX_BODY_BYTES: not a valid Integer", "s3cr3t-Zq81"},
		{"EmptyLogLevel", []string{db, key, clients, "LOG_LEVEL="}, "LOG_LEVEL", ""},
		{"ShortHashKey", []string{db, clients, "PII_HASH_KEY=short-Zq81xVb0"}, "PII_HASH_KEY", "short-Zq81xVb0"},
		{"LeadRetentionBelowKeyRetention", []string{db, key, clients, "LEAD_RETENTION=24h"}, "LEAD_RETENTION must be at least KEY_RETENTION", ""},
		{"EmptyAdminAddr", []string{db, key, clients, "ADMIN_ADDR="}, "ADMIN_ADDR", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := testkit.RunProgram(t, tt.env)
			line := strings.TrimSuffix(r.Stderr, "\n")
			if r.Code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q", r.Code, r.Stderr, tt.want)
			}
			if tt.secret != "" && strings.Contains(r.Stderr+r.Stdout, tt.secret) {
				t.Fatalf("the output shows the value %q: %q", tt.secret, r.Stderr)
			}
		})
	}
}

// ALLOWED_SOURCES set to nothing allows any source; unset, it takes the
// default list.
func TestAllowedSources(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "PII_HASH_KEY": testPIIHashKey, "API_CLIENTS": "a=" + strings.Repeat("0", 64)}
	t.Run("Unset", func(t *testing.T) {
		testkit.Environment(t, base)
		var cfg config
		if err := service.Config(&cfg); err != nil {
			t.Fatal(err)
		}
		if got := nonEmpty(cfg.AllowedSources); len(got) != 5 {
			t.Fatalf("unset: %q, want the default five", got)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		testkit.Environment(t, base)
		t.Setenv("ALLOWED_SOURCES", "")
		var cfg config
		if err := service.Config(&cfg); err != nil {
			t.Fatal(err)
		}
		if got := nonEmpty(cfg.AllowedSources); len(got) != 0 {
			t.Fatalf("set to nothing: %q, want none (any source)", got)
		}
	})
}

// `api hash-password` prints a bcrypt hash of the first line of stdin that
// the clients file takes for an operator; no password, one longer than
// bcrypt reads, or a cost the file refuses is bad usage.
func TestHashPassword(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := runHashPassword([]string{"--cost", "10"}, strings.NewReader("correct horse\nignored\n"), &out); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimSuffix(out.String(), "\n")
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte("correct horse")) != nil {
		t.Fatalf("%q is not the hash of the first line", hash)
	}
	file := "clients: []\noperators:\n  - {name: alice, password_bcrypt: '" + hash + "', role: viewer}\n"
	if _, err := callers.ParseFile([]byte(file)); err != nil {
		t.Errorf("the clients file refuses the hash: %v", err)
	}
	for name, c := range map[string]struct {
		args  []string
		stdin string
	}{
		"NoPassword": {nil, ""},
		"EmptyLine":  {nil, "\n"},
		"TooLong":    {nil, strings.Repeat("x", 73)},
		"Cheap":      {[]string{"--cost", "4"}, "pw"},
		"Argument":   {[]string{"pw"}, "pw"},
	} {
		var usage *service.UsageError
		if err := runHashPassword(c.args, strings.NewReader(c.stdin), io.Discard); !errors.As(err, &usage) {
			t.Errorf("%s: %v, want bad usage", name, err)
		}
	}
}
