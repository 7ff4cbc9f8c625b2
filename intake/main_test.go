package intake_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if goroutines outlive the tests: every server, pool
// and proxy a test starts is stopped by its cleanup. (The module does not
// depend on goleak; this reads the goroutine dump the same way.)
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(10 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutines outlived the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of the goroutines other than this one
// still running after grace: connections being closed get that long to go.
func leakedGoroutines(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		var leaked []string
		for _, g := range goroutineStacks()[1:] { // the first is this one
			// The signal loop stays for good once anything (the fuzzing
			// engine) has called signal.Notify.
			if !strings.Contains(g, "os/signal.loop") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
