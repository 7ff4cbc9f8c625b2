package e2e

// The leadintake command line against the real api and worker: its journal
// carries an enquiry across a kill, and its exit status tells a final
// answer (0, 1) from bad usage (2) and an unknown outcome (3).

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/httpfault"
)

// cliRun is one finished run of the command.
type cliRun struct {
	code           int
	stdout, stderr string
}

// cliCmd returns the command leadintake with args, talking to baseURL with
// the stack's token (no environment at all when baseURL is ""), lead on its
// standard input.
func (s *stack) cliCmd(baseURL, lead string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(bins.Path("leadintake"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if baseURL != "" {
		cmd.Env = append(cmd.Env, "LEADINTAKE_URL="+baseURL, "LEADINTAKE_TOKEN="+s.token)
	}
	cmd.Stdin = strings.NewReader(lead)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// cli runs the command to its end.
func (s *stack) cli(baseURL, lead string, args ...string) cliRun {
	s.t.Helper()
	cmd, stdout, stderr := s.cliCmd(baseURL, lead, args...)
	err := cmd.Start()
	if err != nil {
		s.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(clientPatience):
		_ = cmd.Process.Kill()
		<-done
		s.t.Fatalf("leadintake %v did not end within %s\nstderr: %s", args, clientPatience, stderr)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.t.Fatal(err)
	}
	return cliRun{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

var cliKeyLine = regexp.MustCompile(`(?m)^key: (\S+)$`)

// The command is killed (SIGKILL) while its first request, which the api has
// committed, waits for an answer; run again with the same journal and body,
// it resumes the same key: one lead, exit 0, the final body printed; run a
// third time, it prints that answer again without a new enquiry; another
// body with that journal is bad usage.
func TestCLIJournalSurvivesKill(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	p.Script(http.MethodPost, "/v1/leads", httpfault.Fault{Forward: true, Hang: true})
	journal := filepath.Join(t.TempDir(), "enquiry.journal")
	body := leadBody(201)

	cmd, _, stderr := s.cliCmd(p.URL(), body, "submit", "--journal", journal)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var held httpfault.Request
	select {
	case held = <-p.Faulted():
	case <-time.After(clientPatience):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the first request did not reach the api\nstderr: %s", stderr)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	key := held.Header.Get("Idempotency-Key")
	if n := s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, key); n != 1 {
		t.Fatalf("the held request's key %s: %d rows, want the api to have committed it", key, n)
	}
	var rec struct {
		Key string `json:"key"`
	}
	data, err := os.ReadFile(journal)
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.Key != key {
		t.Fatalf("journal %s (%v): want key %s", data, err, key)
	}

	r := s.cli(p.URL(), body, "submit", "--journal", journal)
	status, stored := relStored(t, s, key)
	if r.code != 0 || r.stdout != string(stored)+"\n" || status != http.StatusCreated {
		t.Fatalf("second run: exit %d\nstdout: %s\nstderr: %s\nstored: %d %s", r.code, r.stdout, r.stderr, status, stored)
	}
	if _, posts := requireSameRequest(t, p, body); len(posts) < 2 {
		t.Fatalf("%d POSTs, want the killed one and the resumed one", len(posts))
	}

	before := len(p.Requests())
	r = s.cli(p.URL(), body, "submit", "--journal", journal)
	if r.code != 0 || r.stdout != string(stored)+"\n" || len(p.Requests()) != before {
		t.Fatalf("third run: exit %d, %d new requests\nstdout: %s\nstderr: %s", r.code, len(p.Requests())-before, r.stdout, r.stderr)
	}
	if r = s.cli(p.URL(), leadBody(202), "submit", "--journal", journal); r.code != 2 {
		t.Fatalf("another body with the journal: exit %d: %s", r.code, r.stderr)
	}
	if d := relRequireOneOfEach(t, s, key); d != 1 {
		t.Fatalf("notification deliveries: %d, want 1", d)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
}

// Each exit status, against the real service.
func TestCLIExitCodes(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)

	t.Run("BadUsage", func(t *testing.T) {
		for _, args := range [][]string{{"submit"}, {"submit", "--timeout", "never"}, {"status"}, {"frobnicate"}} {
			baseURL := p.URL()
			if len(args) == 1 && args[0] == "submit" {
				baseURL = "" // no LEADINTAKE_URL
			}
			if r := s.cli(baseURL, leadBody(301), args...); r.code != 2 {
				t.Fatalf("%v: exit %d, want 2: %s", args, r.code, r.stderr)
			}
		}
	})

	t.Run("Refused", func(t *testing.T) {
		r := s.cli(p.URL(), `{"email":"not an address","source":"carrier-pigeon"}`, "submit")
		if r.code != 1 || !strings.Contains(r.stdout, `"code":"validation_failed"`) {
			t.Fatalf("invalid lead: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if r = s.cli(p.URL(), leadBody(302), "submit", "--key", "exit-code-key-1"); r.code != 0 {
			t.Fatalf("submit: exit %d: %s", r.code, r.stderr)
		}
		r = s.cli(p.URL(), leadBody(303), "submit", "--key", "exit-code-key-1")
		if r.code != 1 || !strings.Contains(r.stdout, `"code":"idempotency_key_reused"`) {
			t.Fatalf("key reused: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if r = s.cli(p.URL(), "", "status", "no-such-key-0001"); r.code != 1 {
			t.Fatalf("status of an unknown key: exit %d: %s", r.code, r.stderr)
		}
	})

	t.Run("OutcomeUnknown", func(t *testing.T) {
		// Every submission is applied and never answered.
		p.Break(http.MethodPost, "/v1/leads", httpfault.Fault{Forward: true, Hang: true})
		body := leadBody(304)
		r := s.cli(p.URL(), body, "submit", "--timeout", "3s")
		p.Heal()
		m := cliKeyLine.FindStringSubmatch(r.stderr)
		if r.code != 3 || m == nil || r.stdout != "" {
			t.Fatalf("exit %d, want 3 and a key line\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		key := m[1]
		// The key resumes the enquiry: status, wait, and submit again.
		if r = s.cli(p.URL(), "", "status", key); r.code != 0 || !strings.Contains(r.stdout, `"idempotency_key":"`+key+`"`) {
			t.Fatalf("status: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		_, stored := relStored(t, s, key)
		if r = s.cli(p.URL(), "", "wait", key); r.code != 0 || r.stdout != string(stored)+"\n" {
			t.Fatalf("wait: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if r = s.cli(p.URL(), body, "submit", "--key", key); r.code != 0 || r.stdout != string(stored)+"\n" {
			t.Fatalf("submit --key: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if n := s.count(`SELECT count(*) FROM leads WHERE idempotency_key = $1`, key); n != 1 {
			t.Fatalf("%d leads for %s, want 1", n, key)
		}
	})
}
