// Package testkit holds what the tests of several packages share: the
// patience of a wait, fresh idempotency keys, a log buffer safe for
// concurrent writers, polling until something holds, a TestMain that
// checks no goroutine is left, and a command run as a program of its own
// (MainOrProgram).
package testkit

import (
	"bytes"
	"crypto/rand"
	"sync"
	"testing"
	"time"
)

// Patience bounds every wait for something that must happen. It is far
// longer than anything takes on a healthy machine; a test waits that long
// only when it is failing.
const Patience = 60 * time.Second

// NewKey returns a fresh, valid idempotency key.
func NewKey() string { return "key-" + rand.Text()[:16] }

// LockedBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Eventually polls cond until it holds, failing the test after Patience.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Patience, what, cond)
}

// EventuallyWithin polls cond until it holds, failing the test after d.
func EventuallyWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("%s: not within %s", what, d)
	}
}

// Within polls cond every 20 ms until it holds or d passes, and reports
// whether it held. It is the one poll of the tests: Eventually and
// EventuallyWithin fail the test when it did not.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
