package e2e

import (
	"strings"
	"testing"
	"time"
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
