package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// downstreamUp reads whether the downstream is up, as every worker sees it.
func (b *testBundle) downstreamUp(t *testing.T, name string) bool {
	t.Helper()
	var up bool
	if err := b.pool.QueryRow(context.Background(), `SELECT up FROM downstreams WHERE name = $1`, name).Scan(&up); err != nil {
		t.Fatal(err)
	}
	return up
}

// waiting counts the leads that wait for the downstream.
func (b *testBundle) waiting(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM leads WHERE waiting_for = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// submitMany claims n new keys for body, each with its own email.
func (b *testBundle) submitMany(t *testing.T, n int) []*submission {
	t.Helper()
	subs := make([]*submission, n)
	for i := range subs {
		subs[i] = b.submit(t, fmt.Sprintf(`{"email":"lead%d@example.com","source":"referral","name":"Lead %d","company":"Company %d"}`, i, i, i))
	}
	return subs
}

// requireDeliveredOnce waits for every lead to complete, and requires one
// CRM record and one notification each, and no attempt spent beyond
// maxAttempt.
func (b *testBundle) requireDeliveredOnce(t *testing.T, subs []*submission, maxAttempt int) {
	t.Helper()
	for _, sub := range subs {
		got := b.waitFinished(t, sub.Key)
		if got.State != lead.KeyCompleted {
			t.Fatalf("key %s: %s %s, want completed", sub.Key, got.State, got.Raw)
		}
		if rec := b.crmRecord(t, sub.Ref); len(rec.IDs) != 1 {
			t.Errorf("lead %s: %d CRM records, want 1", sub.LeadID, len(rec.IDs))
		}
		if _, ok := b.fake.Notification(sub.Ref + ":notify"); !ok {
			t.Errorf("lead %s was not notified", sub.LeadID)
		}
		for _, j := range b.leadJobs(t, sub.LeadID) {
			if j.Attempt > maxAttempt {
				t.Errorf("lead %s: job at attempt %d, want at most %d: waiting spent attempts", sub.LeadID, j.Attempt, maxAttempt)
			}
		}
	}
}

// A CRM outage: the leads that meet it wait without spending attempts,
// one call a PROBE_INTERVAL probes it, and the first that succeeds wakes
// them all.
func TestCRMOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 3, Outages: jobs.Outages{ProbeInterval: time.Second, Failures: 3}})
	if err := b.fake.SetChaos(fake.CRMUpsert, fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	subs := b.submitMany(t, 8)
	testkit.Eventually(t, "the CRM down, every lead waiting for it", func() bool {
		return !b.downstreamUp(t, store.DownstreamCRM) && b.waiting(t, store.DownstreamCRM) == len(subs)
	})
	// While down: at most one call a second (the probes), and every key
	// still processing.
	before := b.fake.Requests(fake.CRMUpsert)
	time.Sleep(3 * time.Second)
	if calls := b.fake.Requests(fake.CRMUpsert) - before; calls > 4 {
		t.Errorf("%d CRM calls in 3 s of outage, want at most the probes (3, and one more at the edge)", calls)
	}
	for _, sub := range subs {
		if row, _ := b.key(t, sub.Key); row.State != lead.KeyProcessing {
			t.Fatalf("key %s %s during the outage, want processing", sub.Key, row.State)
		}
	}
	if err := b.fake.SetChaos(fake.CRMUpsert, fake.Chaos{}); err != nil {
		t.Fatal(err)
	}
	// The failures before the outage was known spent attempts (at most
	// two of three); the wait spent none.
	b.requireDeliveredOnce(t, subs, 3)
	if !b.downstreamUp(t, store.DownstreamCRM) || b.waiting(t, store.DownstreamCRM) != 0 {
		t.Error("the CRM is not up again, or leads still wait")
	}
}

// A notification outage holds the leads at their notification, however
// long, and they are notified once it recovers.
func TestNotificationOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 3, Outages: jobs.Outages{ProbeInterval: time.Second, Failures: 3}})
	if err := b.fake.SetChaos(fake.Notify, fake.Chaos{FailRate: 1, FailStatus: http.StatusBadGateway}); err != nil {
		t.Fatal(err)
	}
	subs := b.submitMany(t, 6)
	testkit.Eventually(t, "the notification service down, every lead waiting for it", func() bool {
		return !b.downstreamUp(t, store.DownstreamNotification) && b.waiting(t, store.DownstreamNotification) == len(subs)
	})
	time.Sleep(2 * time.Second) // past optional steps' budget of three failures
	if err := b.fake.SetChaos(fake.Notify, fake.Chaos{}); err != nil {
		t.Fatal(err)
	}
	b.requireDeliveredOnce(t, subs, 3)
	for _, sub := range subs {
		got, _ := b.key(t, sub.Key)
		if got.Body["notified"] != true {
			t.Errorf("key %s: %s, want notified", sub.Key, got.Raw)
		}
	}
}

// While the enrichment service is down, leads skip it at once with the
// warning enrichment_unavailable.
func TestEnrichmentOutageIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 3, Outages: jobs.Outages{ProbeInterval: time.Hour, Failures: 3}})
	if err := b.fake.SetChaos(fake.Enrichment, fake.Chaos{FailRate: 1}); err != nil {
		t.Fatal(err)
	}
	first := b.submitMany(t, 4)
	testkit.Eventually(t, "the enrichment service down", func() bool { return !b.downstreamUp(t, store.DownstreamEnrichment) })
	calls := b.fake.Requests(fake.Enrichment)
	late := b.submit(t, adaBody)
	got := b.waitFinished(t, late.Key)
	if got.State != lead.KeyCompleted || fmt.Sprint(got.Body["warnings"]) != "[enrichment_unavailable]" {
		t.Fatalf("a lead during the outage: %s, want completed with enrichment_unavailable", got.Raw)
	}
	if n := b.fake.Requests(fake.Enrichment); n != calls {
		t.Errorf("%d enrichment calls after the outage was known, want none (the next probe is an hour away)", n-calls)
	}
	if runs := b.leadJobs(t, late.LeadID); len(runs) != 1 || runs[0].Attempt != 1 {
		t.Errorf("the late lead's jobs %+v, want one attempt", runs)
	}
	for _, sub := range first {
		b.waitFinished(t, sub.Key)
	}
}

// A 429 with Retry-After holds every lead's calls to the CRM, spending no
// attempt.
func TestRetryAfterHoldsEveryLead(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 2, Outages: jobs.Outages{ProbeInterval: time.Hour}})
	b.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusTooManyRequests, RetryAfter: "3600"})
	first := b.submit(t, adaBody)
	testkit.Eventually(t, "the first lead waiting for the CRM", func() bool { return b.waiting(t, store.DownstreamCRM) == 1 })
	// The leads that come after it do not call the CRM at all.
	subs := append(b.submitMany(t, 4), first)
	testkit.Eventually(t, "every lead waiting for the CRM", func() bool { return b.waiting(t, store.DownstreamCRM) == len(subs) })
	if n := b.fake.Requests(fake.CRMUpsert); n != 1 {
		t.Fatalf("%d CRM calls, want the one that was answered 429", n)
	}
	if !b.downstreamUp(t, store.DownstreamCRM) {
		t.Error("a 429 made the CRM down; it holds calls, it is not down")
	}
	// The hold ends (as if its hour passed), and the periodic round wakes
	// the leads (a round wakes the jobs that have snoozed; one still
	// snoozing is woken by the next).
	b.exec(t, `UPDATE downstreams SET held_until = now() WHERE name = 'crm'`)
	testkit.Eventually(t, "the waiting leads woken", func() bool {
		b.wakeWaiting(t)
		return b.waiting(t, store.DownstreamCRM) == 0
	})
	b.requireDeliveredOnce(t, subs, 1)
}

// wakeWaiting works one round of the periodic wake-up.
func (b *testBundle) wakeWaiting(t *testing.T) {
	t.Helper()
	b.waitJob(t, b.insertJob(t, jobs.WakeWaitingArgs{}), "completed")
}

// A lead still waiting DELIVERY_MAX_AGE after its claim ends as at the end
// of its attempts.
func TestDeliveryMaxAge(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 5, Outages: jobs.Outages{ProbeInterval: time.Hour, DeliveryMaxAge: 3 * time.Second, Failures: 2}})
	if err := b.fake.SetChaos(fake.CRMUpsert, fake.Chaos{FailRate: 1}); err != nil {
		t.Fatal(err)
	}
	subs := b.submitMany(t, 3)
	for _, sub := range subs {
		requireFailed(t, b.waitFinished(t, sub.Key), sub.LeadID, http.StatusBadGateway, "downstream_unavailable")
	}
}

// A rate limit bounds the calls started across every worker: a burst of N,
// then N a period.
func TestRateLimitIsShared(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Outages: jobs.Outages{Limits: map[string]store.Limit{store.DownstreamCRM: {N: 2, Per: time.Second}}}})
	b.startWorker(t) // a second worker shares the budget
	subs := b.submitMany(t, 8)
	b.requireDeliveredOnce(t, subs, 1)
	rows, err := b.pool.Query(context.Background(), `SELECT started_at FROM lead_calls WHERE step = 'crm' AND outcome <> 'not_sent' ORDER BY started_at`)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, at)
	}
	if len(starts) != len(subs) {
		t.Fatalf("%d CRM calls logged, want %d", len(starts), len(subs))
	}
	// A burst of 2, then 2 a second: the last of 8 starts at least 2.5 s
	// after the first (3 s, less the scheduling of the first calls).
	if span := starts[len(starts)-1].Sub(starts[0]); span < 2500*time.Millisecond {
		t.Errorf("8 CRM calls within %s, want them spread over 3 s by the limit of 2/s", span)
	}
}

// Tokens leased from a rate limit (three at once for 30/s) count as
// spent: two workers with leases start no more calls than the limit allows.
func TestRateLimitLeasesKeepTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Outages: jobs.Outages{Limits: map[string]store.Limit{store.DownstreamCRM: {N: 30, Per: time.Second}}}})
	b.startWorker(t)
	subs := b.submitMany(t, 90)
	b.requireDeliveredOnce(t, subs, 1)
	var first, last time.Time
	if err := b.pool.QueryRow(context.Background(),
		`SELECT min(started_at), max(started_at) FROM lead_calls WHERE step = 'crm' AND outcome <> 'not_sent'`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	// A burst of 30, then 30 a second: the 90th call starts 2 s after the
	// first at the earliest (less the scheduling of the first calls).
	if span := last.Sub(first); span < 1800*time.Millisecond {
		t.Errorf("90 CRM calls within %s, want them spread over 2 s by the limit of 30/s", span)
	}
}

// The delivery log lists every call of a lead, oldest first, with its
// attempt and outcome.
func TestDeliveryLogOfALead(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Outages: jobs.Outages{ProbeInterval: time.Hour}})
	b.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusBadGateway})
	sub := b.submit(t, adaBody)
	b.waitFinished(t, sub.Key)
	calls, err := b.store.Calls(context.Background(), sub.LeadID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%s/%d/%s", c.Step, c.Attempt, c.Outcome))
	}
	want := []string{"enrichment/1/200", "crm/1/502", "crm/2/201", "notification/2/202"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if !sort.SliceIsSorted(calls, func(i, j int) bool { return calls[i].StartedAt.Before(calls[j].StartedAt) }) {
		t.Errorf("calls not oldest first: %+v", calls)
	}
}

// One lead's failures are never an outage, even right after another lead's
// failures that ended in a success: the success starts the count again.
func TestOneLeadsFailuresAfterAnothersSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 10, Outages: jobs.Outages{Failures: 4}})
	// The first lead fails three times, then goes through.
	b.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusBadGateway}, fake.Fault{Status: http.StatusBadGateway},
		fake.Fault{Status: http.StatusBadGateway})
	first := b.submit(t, adaBody)
	if got := b.waitFinished(t, first.Key); got.State != lead.KeyCompleted {
		t.Fatalf("first lead: %s", got.Raw)
	}
	// The second fails on every attempt, alone: its attempts run out.
	faults := make([]fake.Fault, 10)
	for i := range faults {
		faults[i] = fake.Fault{Status: http.StatusBadGateway}
	}
	b.fake.Script(fake.CRMUpsert, faults...)
	second := b.submit(t, adaBody)
	requireFailed(t, b.waitFinished(t, second.Key), second.LeadID, http.StatusBadGateway, "downstream_unavailable")
	if !b.downstreamUp(t, store.DownstreamCRM) {
		t.Error("one lead's failures made the CRM down")
	}
}

// The first failures of a notification outage, before it is found, are
// shared by the leads that meet it: a lead's own are its first, and those
// before another lead's failure comes after it. Three leads failing in
// turn reach the detector's eight failures in a row without one giving its
// notification up after three of its own, and all are notified once the
// service recovers.
func TestOutageFirstFailuresAreShared(t *testing.T) {
	t.Parallel()
	g := newGate(http.MethodPost, "/notify", 3)
	b := setup(t, &setupOpts{MaxAttempts: 20, Gate: g, Outages: jobs.Outages{ProbeInterval: time.Second, Failures: jobs.DefaultOutageFailures}})
	if err := b.fake.SetChaos(fake.Notify, fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	subs := b.submitMany(t, 3)
	// The leads' first calls at once: from then on they fail in turn.
	g.Arrived(t, 3)
	g.Open()
	testkit.Eventually(t, "the notification service found down, or a key finished", func() bool {
		for _, sub := range subs {
			if row, _ := b.key(t, sub.Key); row.State != lead.KeyProcessing {
				return true
			}
		}
		return !b.downstreamUp(t, store.DownstreamNotification)
	})
	for _, sub := range subs {
		if row, _ := b.key(t, sub.Key); row.State != lead.KeyProcessing {
			t.Fatalf("key %s %s %s while the notification service failed for every lead, want processing", sub.Key, row.State, row.Raw)
		}
	}
	if err := b.fake.SetChaos(fake.Notify, fake.Chaos{}); err != nil {
		t.Fatal(err)
	}
	b.requireDeliveredOnce(t, subs, 20)
	for _, sub := range subs {
		if got, _ := b.key(t, sub.Key); got.Body["notified"] != true {
			t.Errorf("key %s: %s, want notified", sub.Key, got.Raw)
		}
		var failures int
		if err := b.pool.QueryRow(t.Context(), `SELECT notify_failures FROM leads WHERE id = $1`, sub.LeadID).Scan(&failures); err != nil {
			t.Fatal(err)
		}
		if failures > 2 {
			t.Errorf("lead %s: %d notification failures counted as its own, want at most 2", sub.LeadID, failures)
		}
	}
}
