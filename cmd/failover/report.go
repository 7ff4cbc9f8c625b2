package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// result is what one run measured, for the closing table.
type result struct {
	mode        string
	servedAfter time.Duration // from the start of the failover until the api served again
	unavailable int           // 503s
	transport   int           // requests that got no answer
	other5xx    int           // 5xx other than 503 and a final 502
	accepted    int
	lost        int
	window      string // when the lost keys had been answered
	failed      int    // promises broken
}

func (c *checker) result() *result {
	d, l := c.d, c.l
	out := d.out
	r := &result{mode: d.mode(), accepted: c.accepted, lost: len(c.lost)}

	l.mu.Lock()
	var first, last time.Time
	for _, o := range l.outages {
		switch o.status {
		case 0:
			r.transport++
		case 503:
			r.unavailable++
		}
		if first.IsZero() || o.received.Before(first) {
			first = o.received
		}
		if o.received.After(last) {
			last = o.received
		}
	}
	for k, n := range l.byStatus {
		var method string
		var status int
		if _, err := fmt.Sscanf(k, "%s %d", &method, &status); err == nil && status >= 500 && status != 503 && status != 502 {
			r.other5xx += n
		}
	}
	waits, polls, replays := l.waits, l.polls, l.replays
	l.mu.Unlock()
	if !c.servedAgain.IsZero() {
		r.servedAfter = c.servedAgain.Sub(d.began)
	}

	out.f("  load: %d keys (%d with Prefer: wait), %d polled, %d sent again; answers %s",
		len(l.submissions()), waits, polls, replays, l.statusCounts())
	if first.IsZero() {
		out.f("  api: never unavailable")
	} else {
		out.f("  api: %d answered 503, %d other 5xx, %d without an answer; from %s to %s", r.unavailable, r.other5xx, r.transport, d.since(first), d.since(last))
	}
	if !c.servedAgain.IsZero() {
		out.f("  api served again %.2fs after the failover began", r.servedAfter.Seconds())
	}
	if !c.workerResumed.IsZero() {
		out.f("  worker finished a lead on the new primary %.2fs after the failover began (%d finished there); %s",
			c.workerResumed.Sub(d.began).Seconds(), c.finishedAfter, c.drained)
	}
	out.f("  downstream: %d CRM records; %d notifications delivered more than once (same Idempotency-Key)",
		len(c.s.fake.State().CRM), c.redelivered)
	out.f("  keys answered 202 or final: %d; lost: %d", c.accepted, len(c.lost))
	if len(c.lost) > 0 {
		sort.Slice(c.lost, func(i, j int) bool { return c.lost[i].sent.Before(c.lost[j].sent) })
		r.window = fmt.Sprintf("sent from %s to %s", d.since(c.lost[0].sent), d.since(c.lost[len(c.lost)-1].sent))
		out.f("  lost keys were %s of the start of the failover (promotion at %s, old primary stopped at %s); %d of their leads had reached the CRM",
			r.window, d.since(d.promoted), d.since(d.stopped), c.orphanRecords)
		for i, k := range c.lost {
			if i == maxShown {
				out.f("    ... and %d more", len(c.lost)-i)
				break
			}
			out.f("    %s, sent at %s: %s", k.key, d.since(k.sent), k.how)
		}
		if d.sync {
			d.fail(promiseKept, "%d keys lost with synchronous replication", len(c.lost))
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range promises {
		problems := d.problems[p]
		if len(problems) == 0 {
			if p == promiseKept && len(c.lost) > 0 {
				out.f("  MEASURED %s: %d lost (asynchronous replication promises no more)", p, len(c.lost))
				continue
			}
			out.f("  held     %s", p)
			continue
		}
		r.failed++
		out.f("  FAILED   %s (%d)", p, len(problems))
		for i, pr := range problems {
			if i == maxShown {
				out.f("             ... and %d more", len(problems)-i)
				break
			}
			out.f("             %s", pr)
		}
	}
	return r
}

// printTable prints one line per run.
func printTable(out *printer, results []*result) {
	out.f("")
	out.f("%-4s %-6s %14s %6s %10s %6s %9s %5s  %s", "run", "mode", "served again", "503s", "no answer", "5xx", "accepted", "lost", "lost keys")
	for i, r := range results {
		window := r.window
		if window == "" {
			window = "-"
		}
		out.f("%-4d %-6s %13.2fs %6d %10d %6d %9d %5d  %s", i+1, r.mode, r.servedAfter.Seconds(), r.unavailable, r.transport, r.other5xx, r.accepted, r.lost, window)
	}
	out.f("(served again: seconds from the start of the failover until the first answer to a request sent after the last failed one;")
	out.f(" 5xx: other than 503 and a final 502; lost keys: when the requests answered 202 or final had been sent, relative to")
	out.f(" the start of the failover)")
}

// printer writes lines, safe for concurrent use.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) f(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, strings.TrimRight(format, "\n")+"\n", args...)
}
