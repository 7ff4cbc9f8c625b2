package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/testkit"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeClientsFile writes a clients file with one client, "filed", whose
// bearer token is token, atomically (a reload never reads half a file).
func writeClientsFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func filedClient(token string) string {
	return "clients:\n  - id: filed\n    tokens_sha256: [" + sha256Hex(token) + "]\n"
}

// submitAs POSTs body under key with token; it returns, not fails on, an
// error.
func (s *stack) submitAs(token, key, body string) int {
	s.t.Helper()
	return s.keepRetrying(func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", bytes.NewBufferString(body))
		if err != nil {
			s.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		return req
	}).status
}

// The clients file is read again on SIGHUP: a new token works within
// seconds, the old one no longer does, API_CLIENTS stays; a bad file is
// refused with a log line, and the clients in force stay.
func TestClientsFileReload(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	path := filepath.Join(t.TempDir(), "clients.yaml")
	writeClientsFile(t, path, filedClient("first-token-0001"))
	api := s.startAPI("CLIENTS_FILE=" + path)

	if got := s.submitAs("first-token-0001", "filed-key-0001", leadBody(1)); got != http.StatusAccepted {
		t.Fatalf("the file's token: %d, want 202", got)
	}
	writeClientsFile(t, path, filedClient("second-token-0002"))
	if err := syscall.Kill(api.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 5*time.Second, "the new token in force", func() bool {
		return s.submitAs("second-token-0002", "filed-key-0002", leadBody(2)) == http.StatusAccepted
	})
	if got := s.submitAs("first-token-0001", "filed-key-0003", leadBody(3)); got != http.StatusUnauthorized {
		t.Errorf("the old token after the reload: %d, want 401", got)
	}
	if got := s.submitAs(s.token, "env-key-00000001", leadBody(4)); got != http.StatusAccepted {
		t.Errorf("API_CLIENTS's token after the reload: %d, want 202", got)
	}

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	writeClientsFile(t, path, "clients:\n  - id: filed\n    webhook_secret: "+strings.TrimPrefix(secret, "whsec_")+"\n")
	if err := syscall.Kill(api.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 5*time.Second, "the bad file refused", func() bool {
		return strings.Contains(api.Output(), "clients file refused")
	})
	if got := s.submitAs("second-token-0002", "filed-key-0004", leadBody(5)); got != http.StatusAccepted {
		t.Errorf("after a bad file: %d, want 202 (the clients in force stay)", got)
	}
	if strings.Contains(api.Output(), strings.TrimPrefix(secret, "whsec_")) {
		t.Error("the api's output shows the bad file's secret")
	}
}

// A clients file that group or others may read is warned about, at start
// and at each reload, in one log line that names the path and shows none
// of the file's content; one readable by its owner alone, or by the
// service's own group (a Kubernetes Secret mounted 0440 for the pod's
// fsGroup), is not.
func TestClientsFileReadableByOthersIsWarned(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	content := filedClient("readable-token-0001") + "    webhook_secret: " + secret + "\n"
	warned := func(p *system.Process) (n int, line string) {
		for _, l := range p.Lines() {
			if strings.Contains(l, "clients file readable by others, or by a group the service is not in") {
				n, line = n+1, l
			}
		}
		return n, line
	}
	for _, tt := range []struct {
		name string
		mode os.FileMode
		// otherGroup gives the file a group the service is not in (as
		// root only).
		otherGroup bool
		want       int
	}{
		{"OwnerOnly", 0o600, false, 0}, {"GroupAndOthers", 0o644, false, 1},
		{"OwnGroup", 0o440, false, 0}, {"AnotherGroup", 0o640, true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.otherGroup && os.Geteuid() != 0 {
				t.Skip("only root gives a file a group it is not in")
			}
			s := newStack(t, nil)
			path := filepath.Join(t.TempDir(), "clients.yaml")
			writeClientsFile(t, path, content)
			if tt.otherGroup {
				if err := os.Chown(path, -1, 65533); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			api := s.startAPI("CLIENTS_FILE=" + path)
			worker := s.startWorker("CLIENTS_FILE=" + path)
			for name, p := range map[string]*system.Process{"api": api, "worker": worker} {
				n, line := warned(p)
				if n != tt.want {
					t.Fatalf("%s: %d warnings for mode %04o, want %d:\n%s", name, n, tt.mode, tt.want, p.Output())
				}
				if n == 0 {
					continue
				}
				if !strings.Contains(line, path) {
					t.Errorf("%s: the warning does not name the file: %s", name, line)
				}
				for _, v := range []string{secret, sha256Hex("readable-token-0001"), "readable-token-0001"} {
					if strings.Contains(p.Output(), v) {
						t.Errorf("%s: the output shows the file's content %q", name, v)
					}
				}
			}
			if tt.want == 0 {
				return
			}
			// Read again on SIGHUP, and warned about again.
			if err := syscall.Kill(api.Pid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			testkit.EventuallyWithin(t, 10*time.Second, "a second warning on reload", func() bool {
				n, _ := warned(api)
				return n == 2
			})
		})
	}
}
