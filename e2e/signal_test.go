package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/testkit"
)

// Idle api and worker processes stop on SIGTERM with exit status 0 well
// within SHUTDOWN_TIMEOUT (TestGracefulStop covers a stop with work in
// flight).
func TestSIGTERMWhileIdle(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	const budget = 15 * time.Second
	api := s.startAPI("SHUTDOWN_TIMEOUT=" + budget.String())
	worker := s.startWorker("SHUTDOWN_TIMEOUT=" + budget.String())
	// Both are serving: the api answers, the worker's River client runs.
	if r := s.get("/readyz"); r.status != 200 {
		t.Fatalf("api /readyz: %d", r.status)
	}
	scrape(t, adminURL(t, worker)+"/metrics", basicAuth{})

	for _, p := range []struct {
		name    string
		stopped string
		stop    func(time.Duration) error
		lines   func() []string
	}{
		{"worker", "worker stopped", worker.Stop, worker.Lines},
		{"api", "api stopped", api.Stop, api.Lines},
	} {
		start := time.Now()
		if err := p.stop(budget); err != nil {
			t.Fatalf("%s after SIGTERM: %v (want exit 0 within SHUTDOWN_TIMEOUT %s)", p.name, err, budget)
		}
		t.Logf("%s exited 0 %s after SIGTERM", p.name, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(strings.Join(p.lines(), "\n"), p.stopped) {
			t.Errorf("%s logged no %q line", p.name, p.stopped)
		}
	}
}

// hangupLines are the log lines of p that tell of a SIGHUP ignored.
func hangupLines(lines []string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, `"SIGHUP ignored`) {
			n++
		}
	}
	return n
}

// Without CLIENTS_FILE there is nothing to read again: SIGHUP is logged and
// ignored, and the processes go on serving, then stop with exit 0.
func TestSIGHUPWithoutClientsFileIsIgnored(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI()
	worker := s.startWorker()
	for _, p := range []*system.Process{api, worker} {
		if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for name, p := range map[string]*system.Process{"api": api, "worker": worker} {
		testkit.EventuallyWithin(t, 10*time.Second, name+" logs the SIGHUP it ignored", func() bool { return hangupLines(p.Lines()) == 1 })
		select {
		case <-p.Done():
			t.Fatalf("%s ended on SIGHUP: %v", name, p.ExitErr())
		default:
		}
	}
	if r := s.get("/readyz"); r.status != 200 {
		t.Fatalf("api /readyz after SIGHUP: %d", r.status)
	}
	scrape(t, adminURL(t, worker)+"/metrics", basicAuth{})
	for name, p := range map[string]*system.Process{"api": api, "worker": worker} {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit 0", name, err)
		}
	}
}

// A SIGHUP that comes while a process starts (here while it reads its
// clients file, a FIFO that the test holds open) is logged and ignored: the
// process starts, and it reads the file again once started, so that an
// edit made meanwhile is in force.
func TestSIGHUPDuringStartUpIsIgnored(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	for _, name := range []string{"api", "worker"} {
		t.Run(name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "clients.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			var p *system.Process
			if name == "api" {
				sum := sha256.Sum256([]byte(s.token))
				p = s.start("api", []string{"DATABASE_URL=" + s.dbURL, "API_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0",
					"API_CLIENTS=e2e=" + hex.EncodeToString(sum[:]), piiHashKey, "CLIENTS_FILE=" + fifo})
			} else {
				p = s.start("worker", []string{"DATABASE_URL=" + s.dbURL, "ADMIN_ADDR=127.0.0.1:0", "SIMULATE_DOWNSTREAM=true",
					piiHashKey, "CLIENTS_FILE=" + fifo})
			}
			// Opening the FIFO for writing waits for the process to open it
			// for reading.
			open := func(what string) *os.File {
				t.Helper()
				opened := make(chan *os.File, 1)
				go func() {
					f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
					if err != nil {
						t.Error(err)
					}
					opened <- f
				}()
				select {
				case f := <-opened:
					if f == nil {
						t.FailNow()
					}
					return f
				case <-p.Done():
					t.Fatalf("%s exited before it read its clients file %s: %v\n%s", name, what, p.ExitErr(), p.Output())
				case <-time.After(time.Minute):
					t.Fatalf("%s did not read its clients file %s:\n%s", name, what, p.Output())
				}
				return nil
			}
			write := func(f *os.File, content string) {
				t.Helper()
				_, err := f.WriteString(content)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatal(err)
				}
			}

			// The process is in its own code, starting, reading the file.
			f := open("at start")
			if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			testkit.EventuallyWithin(t, 10*time.Second, name+" logs the SIGHUP it ignored", func() bool {
				select {
				case <-p.Done():
					t.Fatalf("%s ended on SIGHUP while starting: %v\n%s", name, p.ExitErr(), p.Output())
				default:
				}
				return hangupLines(p.Lines()) == 1
			})
			write(f, filedClient("startup-token-0001"))
			// Started (it has read the file to its end: a writer opening the
			// FIFO before would add to what it reads), it reads the file
			// again: the edit made meanwhile.
			if _, err := p.Addr(context.Background(), "admin_addr"); err != nil {
				t.Fatal(err)
			}
			write(open("again once started"), filedClient("startup-token-0002"))
			testkit.EventuallyWithin(t, 10*time.Second, name+" reads the file again once started", func() bool {
				return strings.Contains(strings.Join(p.Lines(), "\n"), "clients file read again")
			})
			if name == "api" {
				addr, err := p.Addr(context.Background(), "addr")
				if err != nil {
					t.Fatal(err)
				}
				s.apiURL = "http://" + addr
				if got := s.submitAs("startup-token-0002", "startup-key-0001", leadBody(1)); got != 202 {
					t.Errorf("the token of the file read again: %d, want 202", got)
				}
			}
			if err := p.Stop(15 * time.Second); err != nil {
				t.Errorf("%s after SIGTERM: %v, want exit 0", name, err)
			}
		})
	}
}
