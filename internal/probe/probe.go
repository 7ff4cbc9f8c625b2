// Package probe shares a process's readiness check among its probes: a
// load balancer, an orchestrator and a monitor each probing /readyz every
// few seconds, from as many places as they like, cost the database at most
// one check a second.
package probe

import (
	"context"
	"sync"
	"time"
)

// Every is how often a Shared check runs at most.
const Every = time.Second

// Shared is a readiness check shared by every probe of the process: it
// runs at most once per Every, and once at a time, whatever the number of
// probes; the probes that come while it runs wait for its result, and
// those within Every of its start get that result (an error too). Its
// methods are safe for concurrent use.
type Shared struct {
	check   func(ctx context.Context) error
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	run     *run // the latest run, under way or done; nil before the first
	started time.Time
}

// run is one run of the check; done is closed once err is set.
type run struct {
	done chan struct{}
	err  error
}

// Opts configure NewShared.
type Opts struct {
	// Timeout bounds one run of the check. It runs on a context of its own
	// (a probe that gives up does not cut it short for the others).
	Timeout time.Duration
	// Now is the clock; nil for time.Now.
	Now func() time.Time
}

// NewShared returns check shared among the probes (see Shared).
func NewShared(check func(ctx context.Context) error, o Opts) *Shared {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Shared{check: check, timeout: o.Timeout, now: now}
}

// Ready returns the result of the latest run of the check, starting one
// when none is under way and none started within Every; it waits for a
// run under way (a slow database is not asked again meanwhile), or until
// ctx ends (then it returns ctx's error).
func (s *Shared) Ready(ctx context.Context) error {
	s.mu.Lock()
	r := s.run
	if r == nil || (r.finished() && s.now().Sub(s.started) >= Every) {
		r = &run{done: make(chan struct{})}
		s.run, s.started = r, s.now()
		go s.start(context.WithoutCancel(ctx), r)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finished reports whether the run is done.
func (r *run) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (s *Shared) start(ctx context.Context, r *run) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	r.err = s.check(ctx)
	close(r.done)
}
