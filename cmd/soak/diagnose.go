package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds of the diagnoses: of how many leads in a phase, and how much of
// each.
const (
	maxDiagnoses    = 6
	maxDiagLogLines = 60
	maxDiagLineLen  = 400
)

// diagnose records what the database and the workers' logs hold of the
// lead of sub, for a broken invariant: the lead's steps and their
// failures, its delivery log, its River jobs (attempts, state, errors) and
// every worker log line that names it. Times are relative to since (the
// start of an outage, say; zero for the lead's acceptance); why is the
// invariant's complaint. The report prints the diagnoses after the
// invariants.
func (c *checker) diagnose(ctx context.Context, sub *submission, row *keyRow, since time.Time, why string) {
	if len(c.diagnoses) >= maxDiagnoses {
		c.diagnosesLeftOff++
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sub.mu.Lock()
	acceptedAt := sub.acceptedAt
	sub.mu.Unlock()
	if since.IsZero() {
		since = acceptedAt
	}
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.3fs", t.Sub(since).Seconds())
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("%s: %s", sub.id(), why)
	leadID := ""
	if row != nil {
		leadID = row.leadID
	}
	add("  lead %s, accepted (first answer) at %s", leadID, rel(acceptedAt))
	if leadID == "" {
		c.diagnoses = append(c.diagnoses, lines)
		return
	}

	// The lead's steps.
	var (
		enrichment, notify, crmState, waitingFor string
		enrichFailures, notifyFailures           int
		deliverySince, waitingSince              *time.Time
		jobID                                    *int64
	)
	err := c.s.pool.QueryRow(ctx, `
SELECT coalesce(enrichment_outcome, 'pending'), enrichment_failures, crm_state, coalesce(notify_outcome, 'pending'), notify_failures,
       coalesce(waiting_for, ''), waiting_since, delivery_since, job_id
FROM leads WHERE id = $1`, leadID).Scan(&enrichment, &enrichFailures, &crmState, &notify, &notifyFailures,
		&waitingFor, &waitingSince, &deliverySince, &jobID)
	if err != nil {
		add("  leads row: %v", err)
	} else {
		job := "none"
		if jobID != nil {
			job = fmt.Sprint(*jobID)
		}
		add("  leads row: enrichment %s (failures %d), crm %s, notification %s (notify_failures %d), waiting_for %q since %s, delivery_since %s, job %s",
			enrichment, enrichFailures, crmState, notify, notifyFailures, waitingFor, relp(rel, waitingSince), relp(rel, deliverySince), job)
	}

	// The delivery log.
	rows, err := c.s.pool.Query(ctx, `
SELECT step, attempt, started_at, duration_ms, outcome FROM lead_calls WHERE lead_id = $1 ORDER BY id`, leadID)
	if err != nil {
		add("  delivery log: %v", err)
	} else {
		var calls []string
		for rows.Next() {
			var (
				step, outcome string
				attempt, ms   int32
				at            time.Time
			)
			if err := rows.Scan(&step, &attempt, &at, &ms, &outcome); err != nil {
				add("  delivery log: %v", err)
				break
			}
			calls = append(calls, fmt.Sprintf("%s %s#%d %s %dms", rel(at), step, attempt, outcome, ms))
		}
		rows.Close()
		add("  delivery log (%d calls): %s", len(calls), strings.Join(calls, "; "))
	}

	// Its River jobs: the first, and one per re-opening.
	rows, err = c.s.pool.Query(ctx, `
SELECT id, state::text, attempt, max_attempts, created_at, attempted_at, finalized_at,
       coalesce(metadata->>'snoozes', '0'), coalesce(to_jsonb(errors), '[]'::jsonb)
FROM river_job WHERE kind = 'process_lead' AND args->>'lead_id' = $1 ORDER BY id`, leadID)
	if err != nil {
		add("  river jobs: %v", err)
	} else {
		for rows.Next() {
			var (
				id                       int64
				state, snoozes           string
				attempt, maxAttempts     int
				created                  time.Time
				attemptedAt, finalizedAt *time.Time
				errs                     []byte
			)
			if err := rows.Scan(&id, &state, &attempt, &maxAttempts, &created, &attemptedAt, &finalizedAt, &snoozes, &errs); err != nil {
				add("  river job: %v", err)
				break
			}
			add("  river job %d: %s, attempt %d of max_attempts %d, %s snoozes; created %s, last attempted %s, finalized %s",
				id, state, attempt, maxAttempts, snoozes, rel(created), relp(rel, attemptedAt), relp(rel, finalizedAt))
			var list []struct {
				At      time.Time `json:"at"`
				Attempt int       `json:"attempt"`
				Error   string    `json:"error"`
			}
			if err := json.Unmarshal(errs, &list); err != nil {
				add("    errors: %v", err)
			}
			for _, e := range list {
				add("    error of attempt %d at %s: %s", e.Attempt, rel(e.At), clip(e.Error))
			}
		}
		rows.Close()
	}

	// What the workers logged of it, every run of each.
	n := 0
	for i, w := range c.s.workers {
		for line := range strings.Lines(w.Output()) {
			if !strings.Contains(line, leadID) {
				continue
			}
			if n++; n <= maxDiagLogLines {
				add("  worker %d: %s", i+1, clip(strings.TrimSpace(line)))
			}
		}
	}
	if n > maxDiagLogLines {
		add("  ... and %d more worker log lines", n-maxDiagLogLines)
	}
	c.diagnoses = append(c.diagnoses, lines)
}

func relp(rel func(time.Time) string, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return rel(*t)
}

func clip(s string) string {
	if len(s) > maxDiagLineLen {
		return s[:maxDiagLineLen] + "…"
	}
	return s
}

// diagnoseDetection records the calls that reached the outage's downstream
// from its start until the workers found it down (and a moment after),
// with the lead of each: what the detector saw while the leads' failures
// still counted as their own.
func (c *checker) diagnoseDetection(o *outage) {
	to := o.end
	if o.downSince != nil && o.downSince.Add(time.Second).Before(to) {
		to = o.downSince.Add(time.Second)
	}
	short := map[string]string{}
	var parts []string
	for _, call := range c.s.calls.between(o.start, to, o.targets...) {
		id := call.leadID
		if id == "" {
			id = call.ref
		}
		if _, ok := short[id]; !ok {
			short[id] = fmt.Sprintf("L%d", len(short)+1)
		}
		parts = append(parts, fmt.Sprintf("%+.3fs %s", call.at.Sub(o.start).Seconds(), short[id]))
	}
	lines := []string{o.describe(fmt.Sprintf("the %s outage's calls until a second after it was found down", o.downstream))}
	lines = append(lines, "  "+strings.Join(parts, "; "))
	var names []string
	for id, s := range short {
		names = append(names, s+"="+id)
	}
	slices.Sort(names)
	lines = append(lines, "  leads: "+strings.Join(names, " "))
	c.diagnoses = append(c.diagnoses, lines)
}
