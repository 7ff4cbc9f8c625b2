package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
)

// An outage is a downstream that fails every call for a while (fail rate
// 1, 503) during the load: first the CRM, then the notification service.
// While it lasts and until the leads it caught have finished, the CRM and
// the notification service meet no other fault (the enrichment, the
// callbacks, the workers and the api's database keep theirs), so that
// what becomes of those leads is the outage's doing alone.
const (
	outageMin, outageMax = 8 * time.Second, time.Minute
	// recoveryMax bounds the wait, after the last outage, for the leads it
	// caught to finish before the chaos resumes on the CRM and the
	// notification service.
	recoveryMax = time.Minute
	// detectorFailures is how many failures in a row of two leads make a
	// downstream down (docs/outages.md).
	detectorFailures = 8
	// probeSlack allows for calls admitted just before the detection and
	// a probe's start on either side of the window's edges.
	probeSlack = 2
	// detectionGrace: calls arriving this soon after the detection
	// started before it.
	detectionGrace = 500 * time.Millisecond
)

// outage is one outage as it went.
type outage struct {
	downstream string // as in the downstreams table: crm, notification
	targets    []fake.Target
	start, end time.Time
	// downSince is when the workers found it down (nil: never).
	downSince *time.Time
	// upAgain is when the workers saw it up again (zero: not before the
	// recovery wait ended).
	upAgain time.Time
	// leads are the submissions accepted during it.
	leads []*submission
	// What the checks counted: the calls until it was found down, after,
	// and the probes allowed after.
	callsBefore, callsAfter, probes int
}

var (
	crmTargets    = []fake.Target{fake.CRMUpsert, fake.CRMCreate, fake.CRMLookup}
	notifyTargets = []fake.Target{fake.Notify}
	quietTargets  = append(append([]fake.Target(nil), crmTargets...), notifyTargets...)
)

// outageLength is the length of each outage of a phase of d; zero when the
// phase is too short for any.
func outageLength(d time.Duration) time.Duration {
	if d < 4*outageMin {
		return 0
	}
	return min(max(d/5, outageMin), outageMax)
}

// outages runs the CRM's outage, at a fifth of the phase, then the
// notification service's, past its half.
func (p *phase) outages(ctx context.Context, s *stack, l *load) {
	length := outageLength(p.duration)
	if length == 0 {
		p.out.f("  (the phase is too short for outages)")
		return
	}
	start := time.Now()
	plan := []struct {
		at         time.Duration
		downstream string
		targets    []fake.Target
	}{
		{p.duration / 5, "crm", crmTargets},
		{p.duration * 11 / 20, "notification", notifyTargets},
	}
	for i, o := range plan {
		if !sleep(ctx, time.Until(start.Add(o.at))) {
			break
		}
		// The next outage starts on time: the recovery of this one's
		// leads goes on under it (the CRM and the notification service
		// stay quiet but for it).
		recoverBy := time.Now().Add(recoveryMax)
		if i+1 < len(plan) {
			recoverBy = start.Add(plan[i+1].at)
		}
		p.outage(ctx, s, l, o.downstream, o.targets, length, recoverBy)
	}
	p.chaosMu.Lock()
	p.quiet = false
	p.chaosMu.Unlock()
}

// outage takes downstream down for length, then waits until the leads
// accepted meanwhile have finished, or recoverBy.
func (p *phase) outage(ctx context.Context, s *stack, l *load, downstream string, targets []fake.Target, length time.Duration, recoverBy time.Time) {
	o := &outage{downstream: downstream, targets: targets}
	p.chaosMu.Lock()
	p.quiet = true
	for _, t := range quietTargets {
		c := fake.Chaos{}
		for _, down := range targets {
			if t == down {
				c = fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}
			}
		}
		if err := s.fake.SetChaos(t, c); err != nil {
			panic(err)
		}
	}
	o.start = time.Now()
	p.chaosMu.Unlock()
	p.out.f("  outage: the %s is down for %s", downstream, length)

	sleep(ctx, length)
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var up bool
	var since *time.Time
	err := s.pool.QueryRow(dctx, `SELECT up, down_since FROM downstreams WHERE name = $1`, downstream).Scan(&up, &since)
	cancel()
	p.chaosMu.Lock()
	for _, t := range targets {
		_ = s.fake.SetChaos(t, fake.Chaos{})
	}
	o.end = time.Now()
	p.chaosMu.Unlock()
	if err != nil {
		p.violate(invProbes, "%s outage: read the downstream's state: %v", downstream, err)
	} else if !up {
		o.downSince = since
	}
	for _, sub := range l.submissions() {
		sub.mu.Lock()
		at := sub.acceptedAt
		sub.mu.Unlock()
		if !at.IsZero() && !at.Before(o.start) && !at.After(o.end) {
			o.leads = append(o.leads, sub)
		}
	}
	p.out.f("  outage: the %s is back after %s; %d leads accepted during it", downstream, o.end.Sub(o.start).Round(100*time.Millisecond), len(o.leads))

	// Until the leads it caught have finished, or recoverBy.
	for time.Now().Before(recoverBy) {
		if o.upAgain.IsZero() {
			var upNow bool
			if s.pool.QueryRow(context.Background(), `SELECT up FROM downstreams WHERE name = $1`, downstream).Scan(&upNow) == nil && upNow {
				o.upAgain = time.Now()
			}
		}
		if !o.upAgain.IsZero() && unfinished(s, o.leads) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.stats.mu.Lock()
	p.stats.outages = append(p.stats.outages, o)
	p.stats.mu.Unlock()
}

// unfinished counts the submissions whose keys are not finished (-1 when
// the database cannot tell).
func unfinished(s *stack, subs []*submission) int {
	var clientIDs, keys []string
	for _, sub := range subs {
		clientIDs, keys = append(clientIDs, sub.client), append(keys, sub.key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	err := s.pool.QueryRow(ctx, `
SELECT count(*) FROM idempotency_keys k JOIN unnest($1::text[], $2::text[]) AS u(client_id, key)
  ON k.client_id = u.client_id AND k.key = u.key
WHERE k.state IN ('processing', 'needs_reconciliation')`, clientIDs, keys).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// checkOutages checks each outage: the calls it got, and what became of
// the leads accepted during it (before the soak's own re-opening retries
// at the end: nobody retried them).
func (c *checker) checkOutages() {
	p := c.p
	p.stats.mu.Lock()
	outages := append([]*outage(nil), p.stats.outages...)
	p.stats.mu.Unlock()
	st := c.s.fake.State()
	for _, o := range outages {
		calls := c.s.calls.between(o.start, o.end, o.targets...)
		if o.downSince == nil {
			p.violate(invProbes, "%s outage: %d calls in %s, and the workers never found it down",
				o.downstream, len(calls), o.end.Sub(o.start).Round(100*time.Millisecond))
		} else {
			from := *o.downSince
			if from.Before(o.start) {
				from = o.start
			}
			var before, after int
			for _, call := range calls {
				if call.at.Before(from.Add(detectionGrace)) {
					before++
				} else {
					after++
				}
			}
			probes := int(o.end.Sub(from)/probeInterval) + 1
			o.callsBefore, o.callsAfter, o.probes = before, after, probes
			if after > probes+probeSlack {
				p.violate(invProbes, "%s outage: %d calls after it was found down %s in, for %d probes (PROBE_INTERVAL %s) and %d more",
					o.downstream, after, from.Sub(o.start).Round(10*time.Millisecond), probes, probeInterval, probeSlack)
			}
			if limit := detectorFailures + 2*workerConcurrency; before > limit {
				p.violate(invProbes, "%s outage: %d calls before it was found down, more than the %d failures in a row and the %d calls the workers may have in flight",
					o.downstream, before, detectorFailures, 2*workerConcurrency)
			}
		}

		diagnosed := len(c.diagnoses) + c.diagnosesLeftOff
		for _, sub := range o.leads {
			sub.mu.Lock()
			erased := sub.erasing
			sub.mu.Unlock()
			if erased {
				continue
			}
			row := c.firstRows[sub.id()]
			if row == nil || row.state != "completed" {
				state := "missing"
				if row != nil {
					state = string(row.state) + " " + string(row.failureCode)
				}
				p.violate(invOutage, "%s (accepted during the %s outage): %s after the drain, want completed", sub.id(), o.downstream, state)
				c.diagnose(context.Background(), sub, row, o.start, o.describe(state+" after the drain"))
				continue
			}
			b := completedBody(row.body)
			if !b.Notified || b.warned("notification_failed") {
				p.violate(invOutage, "%s (accepted during the %s outage): completed %s, want notified", sub.id(), o.downstream, row.body)
				c.diagnose(context.Background(), sub, row, o.start, o.describe("completed, not notified"))
			}
			ref := chainRef(sub)
			if rec, ok := st.CRM[ref]; !ok || rec.Records != 1 || rec.IDs[0] != b.CRMID {
				p.violate(invOutage, "%s (accepted during the %s outage): crm_id %q; the CRM holds %+v", sub.id(), o.downstream, b.CRMID, rec)
			}
			if n, ok := st.Notifications[notifyKey(sub)]; !ok || n.Deliveries < 1 {
				p.violate(invOutage, "%s (accepted during the %s outage): no notification under its key", sub.id(), o.downstream)
			}
		}
		if len(c.diagnoses)+c.diagnosesLeftOff > diagnosed {
			c.diagnoseDetection(o)
		}
	}
}

// describe is what a diagnosis says of the outage: its downstream, and
// when it was found down, ended and was seen up again, from its start.
func (o *outage) describe(what string) string {
	found := "never found down"
	if o.downSince != nil {
		found = fmt.Sprintf("found down at %+.3fs", o.downSince.Sub(o.start).Seconds())
	}
	up := "not seen up again"
	if !o.upAgain.IsZero() {
		up = fmt.Sprintf("seen up again at %+.3fs", o.upAgain.Sub(o.start).Seconds())
	}
	return fmt.Sprintf("%s; accepted during the %s outage (times from its start; %s, ended at %+.3fs, %s)",
		what, o.downstream, found, o.end.Sub(o.start).Seconds(), up)
}

// outageLines are the report's lines on the outages.
func (c *checker) outageLines() []string {
	c.p.stats.mu.Lock()
	defer c.p.stats.mu.Unlock()
	var lines []string
	for _, o := range c.p.stats.outages {
		found := "never found down"
		if o.downSince != nil {
			found = fmt.Sprintf("found down %s in (%d calls until then), then %d calls for at most %d probes",
				o.downSince.Sub(o.start).Round(10*time.Millisecond), o.callsBefore, o.callsAfter, o.probes)
		}
		back := "not seen up again within the recovery wait"
		if !o.upAgain.IsZero() {
			back = fmt.Sprintf("up again %s after", o.upAgain.Sub(o.end).Round(100*time.Millisecond))
		}
		lines = append(lines, fmt.Sprintf("%s down for %s: %s; %s; %d leads accepted during it",
			o.downstream, o.end.Sub(o.start).Round(100*time.Millisecond), found, back, len(o.leads)))
	}
	return lines
}
