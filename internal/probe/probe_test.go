package probe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// probeAll sends n probes at once and returns their results.
func probeAll(s *Shared, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = s.Ready(context.Background())
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// A hundred probes at once run the check once; within a second of its
// start, probes get its result (a failure too) without another run; past
// it, the next probe runs it again.
func TestSharedRunsOncePerSecond(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var runs atomic.Int32
	down := errors.New("database down")
	var fail atomic.Bool
	s := NewShared(func(context.Context) error {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond) // probes pile up meanwhile
		if fail.Load() {
			return down
		}
		return nil
	}, Opts{Timeout: time.Second, Now: c.now})

	for _, err := range probeAll(s, 100) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("100 probes at once ran the check %d times, want 1", n)
	}
	fail.Store(true)
	c.advance(Every - time.Millisecond)
	if err := s.Ready(context.Background()); err != nil || runs.Load() != 1 {
		t.Fatalf("within a second: %v after %d runs, want the first run's result", err, runs.Load())
	}
	c.advance(time.Millisecond)
	for _, err := range probeAll(s, 100) {
		if !errors.Is(err, down) {
			t.Fatalf("a second on: %v, want the new run's failure", err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	c.advance(Every / 2)
	if err := s.Ready(context.Background()); !errors.Is(err, down) || runs.Load() != 2 {
		t.Fatalf("the failure is not shared: %v after %d runs", err, runs.Load())
	}
}

// A check that outlasts its second is not run again meanwhile: later
// probes wait for it. A probe that gives up returns its own context's
// error, and does not cut the check short for the others.
func TestSharedOneRunAtATime(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	release := make(chan struct{})
	var runs atomic.Int32
	s := NewShared(func(ctx context.Context) error {
		runs.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, Opts{Timeout: time.Minute, Now: c.now})

	impatient, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Ready(impatient); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a probe that gave up: %v", err)
	}
	c.advance(5 * Every)
	done := make(chan []error)
	go func() { done <- probeAll(s, 50) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	for _, err := range <-done {
		if err != nil {
			t.Fatalf("a probe waiting for the run under way: %v", err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1: the slow run is waited for, not doubled", n)
	}
}

// The check's own time-out bounds a run.
func TestSharedTimeout(t *testing.T) {
	t.Parallel()
	s := NewShared(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}, Opts{Timeout: 30 * time.Millisecond})
	if err := s.Ready(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready = %v, want the run's time-out", err)
	}
}
