package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// report is what one phase did and whether its invariants held.
type report struct {
	name    string
	lines   []string
	results []result
	// diagnoses are of the leads that broke an invariant (checker.diagnose).
	diagnoses        [][]string
	diagnosesLeftOff int
}

type result struct {
	invariant string
	problems  []string
}

func (r *report) failures() int {
	n := 0
	for _, res := range r.results {
		if len(res.problems) > 0 {
			n++
		}
	}
	return n
}

func (r *report) print(out *printer) {
	out.f("")
	if r.name == destinationsPhase {
		out.f("== summary, destinations")
	} else {
		out.f("== summary, CRM_MODE=%s", r.name)
	}
	for _, l := range r.lines {
		out.f("%s", l)
	}
	out.f("invariants")
	for _, res := range r.results {
		if len(res.problems) == 0 {
			out.f("  held    %s", res.invariant)
			continue
		}
		out.f("  FAILED  %s (%d)", res.invariant, len(res.problems))
		for i, p := range res.problems {
			if i == maxShownPerInv {
				out.f("            ... and %d more", len(res.problems)-i)
				break
			}
			out.f("            %s", p)
		}
	}
	if len(r.diagnoses) > 0 {
		out.f("diagnoses (times relative to the moment named)")
		for _, d := range r.diagnoses {
			for _, l := range d {
				out.f("  %s", l)
			}
		}
	}
	if r.diagnosesLeftOff > 0 {
		out.f("  ... and %d more leads not diagnosed", r.diagnosesLeftOff)
	}
}

func (c *checker) report(took time.Duration) *report {
	p := c.p
	r := &report{name: p.name, diagnoses: c.diagnoses, diagnosesLeftOff: c.diagnosesLeftOff}
	add := func(format string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(format, args...)) }
	ld := &p.load

	add("duration             %s of chaos, %s in all", p.duration, took.Round(time.Second))
	add("submissions          %d (%d keys shared by both tenants), %d requests",
		ld.submissions.Load(), ld.sharedKeys.Load(), ld.requests.Load())
	add("  retries            %d (after a 503 or a dropped connection, or later at random)", ld.retries.Load())
	add("  duplicate sends    %d (extra copies sent at the same moment)", ld.duplicates.Load())
	add("  dropped clients    %d (requests cancelled by the client mid-request)", ld.dropped.Load())
	add("  changed payloads   %d", ld.changed.Load())
	add("  polls              %d", ld.polls.Load())
	add("  503s               %d", ld.unavailable.Load())
	if n := ld.transportErrors.Load(); n > 0 {
		add("  transport errors   %d (not deliberate)", n)
	}
	if n := ld.throttled.Load(); n > 0 {
		add("  not started        %d (too many submissions under way)", n)
	}
	ld.mu.Lock()
	add("  answers by status  %s (POST and GET)", formatCounts(ld.byStatus))
	ld.mu.Unlock()

	p.stats.mu.Lock()
	add("worker kills         %d (SIGKILL, one of two workers at a time)", p.stats.workerKills)
	add("database outages     %d of the api's (%d cut, %d blackholed; %s in all)",
		p.stats.dbCuts+p.stats.dbBlackholes, p.stats.dbCuts, p.stats.dbBlackholes, p.stats.dbOutage.Round(100*time.Millisecond))
	rounds := len(p.stats.downstreamMix)
	p.stats.mu.Unlock()
	for _, l := range c.outageLines() {
		add("downstream outage    %s", l)
	}
	byKind, byTarget, requests := c.faults.snapshot()
	total := 0
	for _, kv := range byKind {
		total += kv.v
	}
	add("downstream faults    %d of %d requests, %d chaos rounds", total, requests, rounds)
	add("  by kind            %s", formatKV(byKind))
	add("  by target          %s", formatKV(byTarget))

	states := map[string]int{}
	for _, row := range c.rows {
		s := string(row.state)
		if row.failureCode != "" {
			s += " " + string(row.failureCode)
		}
		states[s]++
	}
	add("final states         %s", formatStrCounts(states))
	if c.reopened > 0 {
		add("  re-opened at end   %d downstream_unavailable keys, retried after the drain", c.reopened)
	}
	if c.unsettled > 0 {
		add("  needs_reconciliation %d (left for an operator)", c.unsettled)
	}
	for _, d := range c.drains {
		add("drain                %s", d)
	}
	add("lead jobs            %s", c.jobStates())
	add("  workers logged     %s", formatStrCounts(c.workerEvents))
	if !p.vendors {
		st := c.s.fake.State()
		add("CRM                  %d records under %d references, %d duplicated, %d writes",
			st.Totals.CRMRecords, len(st.CRM), st.Totals.DuplicateRefs, st.Totals.CRMWrites)
	}
	add("notifications        %d, %d deliveries; %d delivered more than once (%d after a delivery whose answer was lost,"+
		" the rest after a worker kill or a lost finishing transaction)", c.notifications, c.deliveries, c.redelivered, c.explained)
	r.lines = append(r.lines, c.featureLines()...)
	r.lines = append(r.lines, c.vendorLines()...)

	p.mu.Lock()
	list := invariants
	if p.vendors {
		list = destinationsInvariants
	}
	for _, inv := range list {
		r.results = append(r.results, result{invariant: inv, problems: p.violations[inv]})
	}
	p.mu.Unlock()
	return r
}

func formatCounts(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func formatStrCounts(m map[string]int) string { return formatKV(sorted(m)) }

func formatKV(list []kv) string {
	if len(list) == 0 {
		return "none"
	}
	var parts []string
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%s: %d", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}

// jobStates counts the lead jobs by state, and those River's rescuer took
// back from a killed worker.
func (c *checker) jobStates() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.s.pool.Query(ctx, `
SELECT state::text, count(*), count(*) FILTER (WHERE errors::text LIKE '%rescued by JobRescuer%')
FROM river_job WHERE kind = 'process_lead' GROUP BY 1`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	states := map[string]int{}
	rescued := 0
	for rows.Next() {
		var state string
		var n, r int
		if err := rows.Scan(&state, &n, &r); err != nil {
			return err.Error()
		}
		states[state] = n
		rescued += r
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s; %d rescued from a killed worker", formatStrCounts(states), rescued)
}
