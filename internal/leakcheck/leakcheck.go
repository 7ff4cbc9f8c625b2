// Package leakcheck fails a test binary when goroutines outlive its tests:
// every server, pool, proxy and hung request a test starts must be ended by
// its cleanup.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// grace is how long goroutines get to end after the last test: closed
// connections take a moment to be noticed, longer on a loaded machine.
const grace = 10 * time.Second

// Main runs the tests of m, then checks, with goleak, that no goroutine is
// left once grace has passed, and exits.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := wait(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func wait() error {
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
