package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const token = "cli-token"

// service stands in for a leadintake service: a new key is stored (202),
// and completed at the first poll; the same key with another body is
// refused; an invalid lead is refused; while down, everything is 503.
type service struct {
	t  *testing.T
	ts *httptest.Server

	mu    sync.Mutex
	down  bool
	keys  map[string]string // key -> body
	posts []string          // the key of each POST, in order
	// onPost, when set, runs at each POST before it is answered.
	onPost func(key string)
}

func newService(t *testing.T) *service {
	t.Helper()
	s := &service{t: t, keys: map[string]string{}}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *service) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer "+token {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"code":"unauthorized","message":"the bearer token is not valid"}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodPost {
		s.posts = append(s.posts, r.Header.Get("Idempotency-Key"))
	}
	if s.down {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"store_unavailable","message":"retry"}}`)
		return
	}
	if r.Method == http.MethodPost {
		key := r.Header.Get("Idempotency-Key")
		if s.onPost != nil {
			s.onPost(key)
		}
		if bytes.Contains(body, []byte(`"email":"invalid"`)) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"error":{"code":"validation_failed","message":"the lead breaks rules","details":[{"field":"email","problem":"not an address"}]}}`)
			return
		}
		if prev, ok := s.keys[key]; ok && prev != string(body) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"error":{"code":"idempotency_key_reused","message":"use a new key"}}`)
			return
		}
		s.keys[key] = string(body)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"status":"processing","idempotency_key":%q,"lead_id":"lead-%s","status_url":"/v1/operations/%s"}`, key, key, key)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/v1/operations/")
	body2, ok := s.keys[key]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no operation with this key"}}`)
		return
	}
	fmt.Fprintf(w, `{"idempotency_key":%q,"state":"%s","lead_id":"lead-%s","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","expires_at":null,"response":%s}`,
		key, stateOf(body2), key, finalOf(key, body2))
}

// A lead from source "crm-refuses" fails for good; any other completes.
func stateOf(body string) string {
	if strings.Contains(body, "crm-refuses") {
		return "failed"
	}
	return "completed"
}

func finalOf(key, body string) string {
	if stateOf(body) == "failed" {
		return `{"status":422,"body":` + failedBody(key) + `}`
	}
	return `{"status":201,"body":` + completedBody(key) + `}`
}

func completedBody(key string) string {
	return `{"status":"completed","lead_id":"lead-` + key + `","crm_id":"crm_1","score":85,"tier":"hot","notified":true,"warnings":[]}`
}

func failedBody(key string) string {
	return `{"status":"failed","lead_id":"lead-` + key + `","error":{"code":"crm_rejected","message":"the CRM refused the lead"}}`
}

func (s *service) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *service) postedKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.posts...)
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command with args against s (nil: no environment), lead on
// standard input.
func cli(t *testing.T, s *service, lead string, args ...string) result {
	t.Helper()
	env := map[string]string{}
	if s != nil {
		env["LEADINTAKE_URL"], env["LEADINTAKE_TOKEN"] = s.ts.URL, token
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append([]string{"leadintake"}, args...), lookup, strings.NewReader(lead), &stdout, &stderr)
	if err != nil {
		fmt.Fprintln(&stderr, errorLine(err))
	}
	return result{code: exitCode(err), stdout: stdout.String(), stderr: stderr.String()}
}

const lead = `{"email":"ada@example.com","source":"referral"}`

var keyLine = regexp.MustCompile(`(?m)^key: (\S+)$`)

func TestUsage(t *testing.T) {
	t.Parallel()
	s := newService(t)
	for _, tc := range []struct {
		name string
		svc  *service
		in   string
		args []string
		want int
	}{
		{"Help", s, "", []string{"-h"}, 0},
		{"SubmitHelp", s, "", []string{"submit", "--help"}, 0},
		{"NoCommand", s, "", nil, 2},
		{"UnknownCommand", s, "", []string{"send"}, 2},
		{"NoEnvironment", nil, lead, []string{"submit"}, 2},
		{"UnknownFlag", s, lead, []string{"submit", "--force"}, 2},
		{"BadTimeout", s, lead, []string{"submit", "--timeout", "soon"}, 2},
		{"NegativeTimeout", s, lead, []string{"submit", "--timeout=-1s"}, 2},
		{"SubmitWithArgument", s, lead, []string{"submit", "lead.json"}, 2},
		{"StatusWithoutKey", s, "", []string{"status"}, 2},
		{"WaitTwoKeys", s, "", []string{"wait", "key-one-0001", "key-two-0001"}, 2},
		{"EmptyInput", s, " \n", []string{"submit"}, 2},
		{"NotJSON", s, "email=ada@example.com", []string{"submit"}, 2},
		{"NotAnObject", s, `["ada@example.com"]`, []string{"submit"}, 2},
		{"KeyFlagOnStatus", s, "", []string{"status", "--key", "k"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, tc.svc, tc.in, tc.args...)
			if r.code != tc.want {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.want, r.stdout, r.stderr)
			}
			if tc.want == 0 && !strings.Contains(r.stdout, "leadintake submit [--key K]") {
				t.Fatalf("no usage on stdout: %s", r.stdout)
			}
		})
	}
	if keys := s.postedKeys(); len(keys) != 0 {
		t.Fatalf("bad usage sent %d requests", len(keys))
	}
}

func TestSubmit(t *testing.T) {
	t.Parallel()

	t.Run("Completed", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		r := cli(t, s, lead, "submit")
		keys := s.postedKeys()
		if r.code != 0 || len(keys) != 1 || r.stdout != completedBody(keys[0])+"\n" {
			t.Fatalf("exit %d, posts %v\nstdout: %s\nstderr: %s", r.code, keys, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "key "+keys[0]+": accepted as lead lead-"+keys[0]) {
			t.Fatalf("no progress on stderr: %s", r.stderr)
		}
	})

	t.Run("GivenKey", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		r := cli(t, s, lead, "submit", "--key", "given-key-0001", "--timeout", "30s")
		if r.code != 0 || s.postedKeys()[0] != "given-key-0001" {
			t.Fatalf("exit %d, posts %v: %s", r.code, s.postedKeys(), r.stderr)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		r := cli(t, s, `{"email":"invalid","source":"referral"}`, "submit")
		if r.code != 1 || !strings.Contains(r.stdout, `"code":"validation_failed"`) || !strings.Contains(r.stderr, "email: not an address") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		r := cli(t, s, `{"email":"ada@example.com","source":"crm-refuses"}`, "submit")
		keys := s.postedKeys()
		if r.code != 1 || len(keys) != 1 || r.stdout != failedBody(keys[0])+"\n" || !strings.Contains(r.stderr, "crm_rejected") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("OutcomeUnknown", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		s.setDown(true)
		r := cli(t, s, lead, "submit", "--timeout", "1500ms")
		m := keyLine.FindStringSubmatch(r.stderr)
		keys := s.postedKeys()
		if r.code != 3 || m == nil || r.stdout != "" || len(keys) == 0 {
			t.Fatalf("exit %d, posts %v\nstdout: %s\nstderr: %s", r.code, keys, r.stdout, r.stderr)
		}
		for _, k := range keys {
			if k != m[1] {
				t.Fatalf("posted keys %v; stderr names %s", keys, m[1])
			}
		}
		// Resumed with the key, once the service is back.
		s.setDown(false)
		r = cli(t, s, lead, "submit", "--key", m[1])
		if r.code != 0 || r.stdout != completedBody(m[1])+"\n" {
			t.Fatalf("resume: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})
}

func TestJournal(t *testing.T) {
	t.Parallel()

	t.Run("KeyOnDiskBeforeTheFirstSend", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		path := filepath.Join(t.TempDir(), "lead.journal")
		var onDisk string
		s.onPost = func(key string) {
			if onDisk == "" {
				var rec record
				data, err := os.ReadFile(path)
				if err == nil && json.Unmarshal(data, &rec) == nil && string(rec.Body) == lead {
					onDisk = rec.Key
				} else {
					onDisk = "none"
				}
			}
		}
		r := cli(t, s, lead, "submit", "--journal", path)
		keys := s.postedKeys()
		if r.code != 0 || onDisk != keys[0] {
			t.Fatalf("exit %d; journal held %q when %s was posted: %s", r.code, onDisk, keys[0], r.stderr)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("journal %v, %v: want mode 0600", info, err)
		}
		first := r.stdout

		// Again, the same body: the answer recorded, the service not asked.
		r = cli(t, s, lead, "submit", "--journal", path)
		if r.code != 0 || r.stdout != first || len(s.postedKeys()) != 1 {
			t.Fatalf("second run: exit %d, posts %v\nstdout: %s\nstderr: %s", r.code, s.postedKeys(), r.stdout, r.stderr)
		}
		// Another body: bad usage, nothing sent.
		r = cli(t, s, `{"email":"grace@example.com","source":"referral"}`, "submit", "--journal", path)
		if r.code != 2 || !strings.Contains(r.stderr, "another enquiry") || len(s.postedKeys()) != 1 {
			t.Fatalf("another body: exit %d, posts %v: %s", r.code, s.postedKeys(), r.stderr)
		}
		// The same body with another key: bad usage.
		if r = cli(t, s, lead, "submit", "--journal", path, "--key", "other-key-0001"); r.code != 2 {
			t.Fatalf("another key: exit %d: %s", r.code, r.stderr)
		}
		// No temporary file is left beside it.
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Fatalf("directory holds %d entries", len(entries))
		}
	})

	t.Run("ResumesBeforeAFinalAnswer", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		s.setDown(true)
		path := filepath.Join(t.TempDir(), "lead.journal")
		r := cli(t, s, lead, "submit", "--journal", path, "--timeout", "1500ms")
		m := keyLine.FindStringSubmatch(r.stderr)
		if r.code != 3 || m == nil {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		s.setDown(false)
		r = cli(t, s, lead, "submit", "--journal", path)
		keys := s.postedKeys()
		if r.code != 0 || keys[len(keys)-1] != m[1] || r.stdout != completedBody(m[1])+"\n" {
			t.Fatalf("exit %d, posts %v, first key %s\nstdout: %s\nstderr: %s", r.code, keys, m[1], r.stdout, r.stderr)
		}
	})

	t.Run("FailureReplayed", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		body := `{"email":"ada@example.com","source":"crm-refuses"}`
		path := filepath.Join(t.TempDir(), "lead.journal")
		first := cli(t, s, body, "submit", "--journal", path)
		again := cli(t, s, body, "submit", "--journal", path)
		if first.code != 1 || again.code != 1 || first.stdout != again.stdout || len(s.postedKeys()) != 1 ||
			!strings.Contains(again.stderr, "crm_rejected") {
			t.Fatalf("exits %d %d, posts %v\n%s\n%s", first.code, again.code, s.postedKeys(), first.stdout, again.stdout)
		}
	})

	t.Run("NotAJournal", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		path := filepath.Join(t.TempDir(), "notes.txt")
		if err := os.WriteFile(path, []byte("shopping list\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := cli(t, s, lead, "submit", "--journal", path); r.code != 2 || len(s.postedKeys()) != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	})
}

func TestStatusAndWait(t *testing.T) {
	t.Parallel()
	s := newService(t)
	r := cli(t, s, lead, "submit", "--key", "status-key-0001")
	if r.code != 0 {
		t.Fatalf("submit: exit %d: %s", r.code, r.stderr)
	}

	// Flags after the key.
	r = cli(t, s, "", "status", "status-key-0001", "--timeout", "10s")
	var op struct {
		Key   string `json:"idempotency_key"`
		State string `json:"state"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &op) != nil || op.Key != "status-key-0001" || op.State != "completed" {
		t.Fatalf("status: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r = cli(t, s, "", "status", "no-such-key-01"); r.code != 1 || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("status of an unknown key: exit %d: %s", r.code, r.stderr)
	}

	if r = cli(t, s, "", "wait", "--timeout", "10s", "status-key-0001"); r.code != 0 || r.stdout != completedBody("status-key-0001")+"\n" {
		t.Fatalf("wait: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r = cli(t, s, "", "wait", "no-such-key-01"); r.code != 1 {
		t.Fatalf("wait for an unknown key: exit %d: %s", r.code, r.stderr)
	}

	s.setDown(true)
	start := time.Now()
	if r = cli(t, s, "", "wait", "status-key-0001", "--timeout", "1s"); r.code != 3 || !strings.Contains(r.stderr, "key: status-key-0001\n") {
		t.Fatalf("wait while down: exit %d: %s", r.code, r.stderr)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("wait --timeout 1s took %s", el)
	}
}
