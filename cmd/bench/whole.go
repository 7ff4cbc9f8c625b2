package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// systemMethod says how the whole-system figure is counted, for the JSON.
const systemMethod = "leads finished per second, from the database: keys that reached completed with " +
	"finished_at (the worker's finishing transaction, PostgreSQL's clock) inside the window, whichever " +
	"request claimed them; the window's edges are taken on PostgreSQL's clock. The claims of the window " +
	"are counted apart (claims), and so is what they left unfinished (backlog_end, drain_seconds)"

// systemResult is the whole-system phase: new leads POSTed closed-loop with
// the worker running and the downstream answering at once, and the leads the
// worker finished meanwhile.
type systemResult struct {
	Clients int `json:"clients"`
	// Seconds is the window, on PostgreSQL's clock.
	Seconds float64 `json:"seconds"`
	// Completed is the figure: keys that reached completed with their
	// finished_at inside the window.
	Completed     int     `json:"completed"`
	CompletedPerS float64 `json:"completed_per_s"`
	// Failed: keys that finished failed inside the window (0 expected).
	Failed int `json:"failed"`
	// Claims are the POSTs of the window, counted when answered 202 as a
	// new key: how fast leads came in, not how fast they were done.
	Claims *loadResult `json:"claims"`
	// BacklogStart and BacklogEnd are the keys not finished at the
	// window's edges: claimed, their jobs waiting or running.
	BacklogStart int `json:"backlog_start"`
	BacklogEnd   int `json:"backlog_end"`
	// BacklogGrowthPerS is (BacklogEnd - BacklogStart) / Seconds: how much
	// faster leads came in than they were finished.
	BacklogGrowthPerS float64 `json:"backlog_growth_per_s"`
	// DrainSeconds runs from the window's end until no key was unfinished.
	DrainSeconds float64 `json:"drain_seconds"`
	// WindowClaimsCompleted: of the Claims.Requests keys claimed in the
	// window, those completed once the backlog had drained.
	WindowClaimsCompleted int    `json:"window_claims_completed"`
	Method                string `json:"method"`
}

// runSystemPhase POSTs new keys named prefix-w-i from clients goroutines,
// closed-loop, for warmup and then d, with the worker running; then it waits
// until every key is finished.
func runSystemPhase(ctx context.Context, s *stack, lg *loadGen, prefix string, clients int, warmup, d time.Duration) (*systemResult, error) {
	type edge struct {
		at      time.Time // PostgreSQL's clock
		backlog int
		err     error
	}
	look := func() edge {
		var e edge
		e.err = s.pool.QueryRow(ctx, `
SELECT clock_timestamp(), count(*) FROM idempotency_keys WHERE state IN ('processing', 'needs_reconciliation')`).Scan(&e.at, &e.backlog)
		return e
	}
	var (
		start, end edge
		endWall    time.Time
		mu         sync.Mutex
		claimed    []string
	)
	claims := closedLoop(ctx, clients, warmup, d,
		func(ctx context.Context, w, i int) (answer, error) {
			key := fmt.Sprintf("%s-%d-%d", prefix, w, i)
			if s.features["spam"] {
				// A page's enquiry, judged, and a person's.
				return lg.postAs(ctx, key, readNothing, pkJudged, http.Header{"Origin": {benchOrigin}, "Form-Signals": {"hp=?0, t=30"}})
			}
			return lg.post(ctx, key, readNothing)
		},
		func(a answer) bool {
			if a.status != 202 || a.replayed != "false" {
				return false
			}
			mu.Lock()
			claimed = append(claimed, a.key)
			mu.Unlock()
			return true
		},
		&windowHooks{
			Start: func() { start = look() },
			End:   func() { end, endWall = look(), time.Now() },
		})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if start.err != nil || end.err != nil {
		return nil, fmt.Errorf("system: the window's edges: %w", errors.Join(start.err, end.err))
	}
	r := &systemResult{
		Clients: clients, Seconds: end.at.Sub(start.at).Seconds(), Claims: claims,
		BacklogStart: start.backlog, BacklogEnd: end.backlog, Method: systemMethod,
	}
	// The finishing transaction sets the lead's finished_at with the key's
	// (the same now()); the lead's is indexed (leads_retention_idx), the
	// key's is not.
	if err := s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE k.state = 'completed'), count(*) FILTER (WHERE k.state = 'failed')
FROM leads l
JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.erased_at IS NULL AND l.finished_at >= $1 AND l.finished_at < $2`, start.at, end.at).Scan(&r.Completed, &r.Failed); err != nil {
		return nil, fmt.Errorf("system: count finished leads: %w", err)
	}
	if r.Seconds > 0 {
		r.CompletedPerS = float64(r.Completed) / r.Seconds
		r.BacklogGrowthPerS = float64(r.BacklogEnd-r.BacklogStart) / r.Seconds
	}
	done, err := s.waitFinished(ctx, 15*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("system: drain the backlog: %w", err)
	}
	r.DrainSeconds = done.Sub(endWall).Seconds()
	if err := s.pool.QueryRow(ctx, `
SELECT count(*) FROM idempotency_keys WHERE client_id = $1 AND key = ANY($2) AND state = 'completed'`,
		benchClient, claimed).Scan(&r.WindowClaimsCompleted); err != nil {
		return nil, fmt.Errorf("system: count the window's keys: %w", err)
	}
	return r, nil
}

func printSystem(name string, r *systemResult) {
	if r == nil {
		return
	}
	c := r.Claims
	fmt.Printf("  %-34s %9.0f /s     (%d completed in %.1f s, %d failed; cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n",
		name, r.CompletedPerS, r.Completed, r.Seconds, r.Failed,
		c.CPU.Machine, c.CPU.API, c.CPU.Worker, c.CPU.Postgres, c.CPU.Bench, c.CPU.Other)
	fmt.Printf("  %-34s %9.0f /s     p50 %6.2f ms  p99 %6.2f ms  (%d errors)\n", "  claims meanwhile (202)", c.PerS, c.P50Ms, c.P99Ms, c.Errors)
	fmt.Printf("  %-34s %9d keys   at start %d, growing %.0f /s; drained %.1f s after the window; %d of the window's %d claims completed\n",
		"  unfinished at the window's end", r.BacklogEnd, r.BacklogStart, r.BacklogGrowthPerS, r.DrainSeconds,
		r.WindowClaimsCompleted, c.Requests)
	if c.FirstError != "" {
		fmt.Printf("  %-34s first error: %s\n", "", c.FirstError)
	}
}
