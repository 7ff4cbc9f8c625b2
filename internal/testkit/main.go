package testkit

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// grace is how long goroutines get to end after the last test: closed
// connections take a moment to be noticed, longer on a loaded machine.
const grace = 10 * time.Second

var atExit struct {
	mu  sync.Mutex
	fns []func()
}

// AtExit registers fn to run once every test of the binary has run, before
// the goroutine check: for what tests share (a database, a pool).
func AtExit(fn func()) {
	atExit.mu.Lock()
	defer atExit.mu.Unlock()
	atExit.fns = append(atExit.fns, fn)
}

// Main is every test binary's TestMain: it runs the tests of m, then what
// AtExit registered, then checks with goleak that no goroutine is left once
// grace has passed (every server, pool, proxy and hung request a test starts
// must be ended by its cleanup), and exits.
func Main(m *testing.M) {
	code := m.Run()
	atExit.mu.Lock()
	for i := len(atExit.fns) - 1; i >= 0; i-- {
		atExit.fns[i]()
	}
	atExit.mu.Unlock()
	if code == 0 {
		if err := waitForGoroutines(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func waitForGoroutines() error {
	deadline := time.Now().Add(grace)
	for {
		// The signal loop stays for good once anything (the fuzzing
		// engine) has called signal.Notify.
		err := goleak.Find(goleak.IgnoreTopFunction("os/signal.loop"), goleak.IgnoreAnyFunction("os/signal.signal_recv"))
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
