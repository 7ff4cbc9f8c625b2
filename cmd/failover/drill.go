package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/system"
)

// drill is one run: a cluster, the system on it, the load, the failover,
// the checks.
type drill struct {
	o     *options
	index int
	sync  bool
	bins  *system.Binaries
	out   *printer

	// The failover's moments.
	began, fenced, promoted, stopped time.Time
	promoteTook                      time.Duration

	mu       sync.Mutex
	problems map[string][]string
}

func (d *drill) mode() string {
	if d.sync {
		return "sync"
	}
	return "async"
}

// fail records a broken promise.
func (d *drill) fail(promise, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.problems == nil {
		d.problems = map[string][]string{}
	}
	d.problems[promise] = append(d.problems[promise], fmt.Sprintf(format, args...))
}

func (d *drill) run(ctx context.Context) (*result, error) {
	c, err := newCluster(d.o.pgBin, d.o.ports, d.sync)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.start(ctx); err != nil {
		return nil, fmt.Errorf("start the cluster: %w\n%s\n%s", err, c.logTail(0, 20), c.logTail(1, 20))
	}
	dbURL := c.serviceURL()
	if err := d.bins.Migrate(ctx, dbURL); err != nil {
		return nil, err
	}
	s, err := startStack(ctx, d.bins, dbURL, d.o.crmMode)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	pool, err := pgxpool.New(ctx, dbURL+"&pool_max_conns=2")
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	l := newLoad(s.apiURL)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		l.run(loadCtx, d.o.rate, d.o.clients, d.o.seed+uint64(d.index))
	}()

	if !sleep(ctx, d.o.before) {
		return nil, ctx.Err()
	}
	if err := d.failover(ctx, c); err != nil {
		return nil, err
	}
	sleep(ctx, d.o.after)
	stopLoad()
	<-loadDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	ch := &checker{d: d, s: s, l: l, pool: pool}
	ch.drain(ctx)
	ch.check(ctx)
	for _, p := range s.exited() {
		d.fail(promiseProcesses, "%s", p)
	}
	for _, p := range s.stopProcesses() {
		d.fail(promiseProcesses, "%s", p)
	}
	ch.scanLogs()
	return ch.result(), nil
}

// failover fails the cluster over. By default the standby is promoted and,
// after -gap, the old primary stopped: meanwhile the old primary still
// takes connections. With -order=stop-first the old primary stops first
// and the standby is promoted after -gap: what the standby had not
// received is gone. With -fence the primary is first made read-only and
// the standby caught up: a planned switchover.
func (d *drill) failover(ctx context.Context, c *cluster) error {
	d.began = time.Now()
	if d.o.fence {
		if err := c.fence(ctx); err != nil {
			return err
		}
		d.fenced = time.Now()
	}
	promote := func() error {
		d.promoted = time.Now()
		if err := c.promote(ctx); err != nil {
			return err
		}
		d.promoteTook = time.Since(d.promoted)
		return nil
	}
	stop := func() error {
		if err := c.stopPrimary(ctx, d.o.stopMode); err != nil {
			return err
		}
		d.stopped = time.Now()
		return nil
	}
	first, second := promote, stop
	if d.o.order == "stop-first" {
		first, second = stop, promote
	}
	if err := first(); err != nil {
		return err
	}
	sleep(ctx, d.o.gap)
	if err := second(); err != nil {
		return err
	}
	fenced := ""
	if d.o.fence {
		fenced = fmt.Sprintf("primary fenced and standby caught up at %s, ", d.since(d.fenced))
	}
	d.out.f("  failover at %s: %sstandby promoted at %s (in %s), old primary stopped (%s) at %s",
		clock(d.began), fenced, d.since(d.promoted), d.promoteTook.Round(time.Millisecond), d.o.stopMode, d.since(d.stopped))
	return nil
}

// since formats t relative to the start of the failover, in seconds.
func (d *drill) since(t time.Time) string {
	return fmt.Sprintf("%+.2fs", t.Sub(d.began).Seconds())
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
