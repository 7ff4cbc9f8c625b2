package intake_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
)

// holdWaiters holds n requests of client on w, each for a lead of its own,
// until stop is closed; it returns once each has made its first look, and
// how many were held.
func holdWaiters(t *testing.T, w *intake.Waiters, client string, n int, stop <-chan struct{}, look func() bool) *atomic.Int64 {
	t.Helper()
	var held atomic.Int64
	var looked sync.WaitGroup
	for range n {
		looked.Add(1)
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-stop; cancel() }()
			first := true
			_, ok := w.Wait(ctx, client, uuid.New(), time.Hour, func() bool {
				if first {
					first = false
					looked.Done()
					return false
				}
				return look()
			})
			if ok {
				held.Add(1)
			}
		}()
	}
	looked.Wait()
	return &held
}

func TestWaitersBoundPerClient(t *testing.T) {
	t.Parallel()
	w := intake.NewWaiters(0)
	stop := make(chan struct{})
	never := func() bool { return false }
	holdWaiters(t, w, "greedy", intake.DefaultMaxWaitersPerClient, stop, never)
	// The greedy client's next request is answered at once; another
	// client's is held.
	if _, held := w.Wait(t.Context(), "greedy", uuid.New(), time.Hour, func() bool { return true }); held {
		t.Error("a request past the client's bound of waiting requests was held")
	}
	other, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, held := w.Wait(other, "modest", uuid.New(), time.Hour, never); !held {
		t.Error("another client's request was not held: one client took every place")
	}
	close(stop)
}

// When the connection that hears finishes comes back, every held request
// looks at its key once, since a finish may have gone unheard; those looks
// are spread out and only a bounded number run at once, rather than every
// held request reading at the same instant.
func TestWaitersSpreadFallbackLooks(t *testing.T) {
	t.Parallel()
	w := intake.NewWaiters(0)
	w.Listening(true)
	const n = 200
	var (
		inLook, most, looks atomic.Int64
		release             = make(chan struct{})
	)
	stop := make(chan struct{})
	defer close(stop)
	holdWaiters(t, w, "a", n, stop, func() bool {
		now := inLook.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		<-release
		inLook.Add(-1)
		looks.Add(1)
		return false
	})
	w.Listening(false)
	w.Listening(true)
	// Let the looks pile up as far as they may, then let them all run.
	deadline := time.Now().Add(testkit.Patience)
	for inLook.Load() < int64(intake.MaxFallbackLooks) && inLook.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	for looks.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if looks.Load() < n {
		t.Fatalf("%d of %d held requests looked again after the connection came back", looks.Load(), n)
	}
	if m := most.Load(); m > int64(intake.MaxFallbackLooks) {
		t.Errorf("%d looks ran at once after the connection came back, want at most %d", m, intake.MaxFallbackLooks)
	}
}

// A key that finishes while nothing can announce it (the connection that
// hears finishes is down) and before any fall-back look: when the wait's
// time is up, the key is looked at once more, and the request is answered
// as the key stands then, not as it stood at the first look.
func TestWaitersLookOnceMoreWhenTimeIsUp(t *testing.T) {
	t.Parallel()
	w := intake.NewWaiters(0)
	w.Listening(false)
	var looks atomic.Int64
	// The first look finds the key unfinished; it finishes right after.
	done, held := w.Wait(t.Context(), "c", uuid.New(), 200*time.Millisecond, func() bool {
		return looks.Add(1) > 1
	})
	if !held || !done {
		t.Fatalf("held %t, done %t after %d looks; want the key found finished by a last look", held, done, looks.Load())
	}
}
