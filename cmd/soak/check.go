package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// checker drains a phase and checks its invariants.
type checker struct {
	p      *phase
	s      *stack
	l      *load
	faults *faultLog

	drains []string // how each drain went
	rows   map[string]*keyRow
	// firstRows are the keys as the first drain left them, before the
	// soak's own re-opening retries.
	firstRows     map[string]*keyRow
	reopened      int
	unsettled     int // keys left in needs_reconciliation
	redelivered   int
	explained     int
	notifications int
	deliveries    int
	// workerEvents counts the workers' log events of leads' ends.
	workerEvents map[string]int
	// What the new checks counted, for the report.
	chains, chainsInCRM                        int
	callbackRows, callbackMsgs, callbackTries  int
	erased, erasedFinished, erasedUnfinished   int
	erasedEarlyCalls, erasedLateCalls          int
	erasedGraceCalls                           int
	waitsUnfinished, waitsFinal, waitsDuringDB int
	pageAnswers                                int
	// diagnoses are what the database and the logs hold of leads that
	// broke an invariant (diagnose); diagnosesLeftOff counts those left
	// out.
	diagnoses        [][]string
	diagnosesLeftOff int
	// vendor is what the destinations phase's checks counted;
	// vendorRecords the records a vendor holds under a submission's
	// chain (set by checkVendors).
	vendor        vendorCounts
	vendorRecords func(sub *submission) []string
}

// keyRow is a key as the database holds it.
type keyRow struct {
	state       lead.KeyState
	leadID      string
	status      int
	body        []byte
	failureCode response.Code
	finishedAt  *time.Time
	superseded  bool
	erased      bool
	externalRef string
}

// drain waits until no key is processing or awaiting reconciliation, or
// the phase's drain bound passes.
func (c *checker) drain(ctx context.Context, why string) {
	start := time.Now()
	deadline := start.Add(c.p.drainFor)
	lastPrint := start
	for {
		var processing, reconciling, callbacks int
		err := c.s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE state = 'processing'), count(*) FILTER (WHERE state = 'needs_reconciliation'),
       (SELECT count(*) FROM callbacks WHERE delivered_at IS NULL AND given_up_at IS NULL)
FROM idempotency_keys`).Scan(&processing, &reconciling, &callbacks)
		if err == nil && processing == 0 && reconciling == 0 && callbacks == 0 {
			c.drains = append(c.drains, fmt.Sprintf("%s: drained in %s", why, time.Since(start).Round(100*time.Millisecond)))
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.drains = append(c.drains, fmt.Sprintf("%s: NOT drained within %s: %d processing, %d needs_reconciliation, %d callbacks owed (err %v)",
				why, c.p.drainFor, processing, reconciling, callbacks, err))
			return
		}
		if time.Since(lastPrint) >= progressEvery {
			lastPrint = time.Now()
			c.p.out.f("  draining %s: %d processing, %d needs_reconciliation, %d callbacks owed", time.Since(start).Round(time.Second), processing, reconciling, callbacks)
		}
		sleep(ctx, drainPollPeriod)
	}
}

// loadRows reads every key.
func (c *checker) loadRows(ctx context.Context) error {
	rows, err := c.s.pool.Query(ctx, `
SELECT k.client_id, k.key, k.state, k.lead_id::text, coalesce(k.response_status, 0), k.response_body, coalesce(k.failure_code, ''),
       k.finished_at, k.superseded_by IS NOT NULL, coalesce(l.erased_at IS NOT NULL, false), coalesce(l.external_ref, '')
FROM idempotency_keys k LEFT JOIN leads l ON l.id = k.lead_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	c.rows = map[string]*keyRow{}
	for rows.Next() {
		var client, key string
		r := &keyRow{}
		var status int16
		if err := rows.Scan(&client, &key, &r.state, &r.leadID, &status, &r.body, &r.failureCode,
			&r.finishedAt, &r.superseded, &r.erased, &r.externalRef); err != nil {
			return err
		}
		r.status = int(status)
		c.rows[client+"/"+key] = r
	}
	return rows.Err()
}

func (c *checker) check(ctx context.Context) {
	p := c.p
	subs := c.l.submissions()
	if err := c.loadRows(ctx); err != nil {
		p.violate(invLost, "read the keys: %v", err)
		return
	}

	// The last word on every accepted key: replayed byte for byte, or, for
	// a key that failed for want of the downstream, re-opened by its retry
	// and then finished.
	c.firstRows = c.rows
	c.checkOutages()
	var reopen []*submission
	for _, sub := range subs {
		row := c.rows[sub.id()]
		if !sub.accepted || row == nil {
			continue
		}
		// A superseded or erased key is never re-opened: its retry is a
		// replay, checked below.
		if row.state == lead.KeyFailed && row.failureCode == response.CodeDownstreamUnavailable && !row.superseded && !row.erased {
			a := c.postFinal(ctx, sub)
			if a.status != http.StatusAccepted || a.replayed != "false" || a.leadID != row.leadID {
				p.violate(invReplay, "%s: the retry of a downstream_unavailable key got %d replayed=%q %s", sub.id(), a.status, a.replayed, a.body)
			}
			reopen = append(reopen, sub)
		}
	}
	if len(reopen) > 0 {
		c.reopened = len(reopen)
		p.out.f("  %d keys failed with downstream_unavailable were retried at the end; draining them", len(reopen))
		c.drain(ctx, "after the re-opening retries")
		if err := c.loadRows(ctx); err != nil {
			p.violate(invLost, "read the keys: %v", err)
			return
		}
	}

	known := map[string]bool{}
	for _, sub := range subs {
		known[sub.id()] = true
		c.checkSubmission(ctx, sub)
	}
	for id := range c.rows {
		if !known[id] {
			p.violate(invOneLead, "%s: a key the soak never sent", id)
		}
	}
	c.checkLeads(ctx)
	c.checkDownstream(subs)
	if p.vendors {
		c.checkVendors(ctx, subs)
	}
	c.checkAmendments(subs)
	c.checkCallbacks(ctx)
	c.checkErasures(ctx, subs)
	c.checkWaits(subs)
}

// postFinal re-POSTs a submission's own payload until an answer other than
// a 503 comes back, and records it.
func (c *checker) postFinal(ctx context.Context, sub *submission) answer {
	for range 60 {
		a, err := c.l.post(sub, sub.lead.encode(nil), false, 0, nil)
		if err == nil && a.status != http.StatusServiceUnavailable && a.status != http.StatusTooManyRequests {
			a.afterDrain = true
			sub.record(a, false)
			return a
		}
		sleep(ctx, time.Second)
	}
	return answer{}
}

// checkSubmission checks one logical submission against its key's row.
func (c *checker) checkSubmission(ctx context.Context, sub *submission) {
	p := c.p
	row := c.rows[sub.id()]
	sub.mu.Lock()
	accepted := sub.accepted
	sub.mu.Unlock()
	switch {
	case !accepted:
		return // never answered: reported by the load as such
	case row == nil:
		p.violate(invLost, "%s: accepted, and its key is not in the database", sub.id())
		return
	case row.state == lead.KeyProcessing:
		p.violate(invFinal, "%s: still processing after the drain", sub.id())
		c.diagnose(ctx, sub, row, time.Time{}, "still processing after the drain (times from its acceptance)")
	case row.state == lead.KeyNeedsReconciliation:
		c.unsettled++
	}

	// The replay, and the operation, after the drain.
	final := c.postFinal(ctx, sub)
	switch row.state {
	case lead.KeyCompleted, lead.KeyFailed:
		if final.status != row.status || !sameFinal(sub, final.body, row.body) || final.replayed != "true" {
			p.violate(invReplay, "%s: replay %d replayed=%q %s; stored %d %s", sub.id(), final.status, final.replayed, final.body, row.status, row.body)
		}
		if sub.page {
			c.pageAnswers++
			c.l.checkProjected(sub, "the replay after the drain", final.body)
		}
	case lead.KeyNeedsReconciliation:
		if final.status != http.StatusAccepted || final.replayed != "true" || !bytes.Contains(final.body, []byte(`"status":"needs_reconciliation"`)) {
			p.violate(invReplay, "%s: replay of a key awaiting reconciliation: %d %s", sub.id(), final.status, final.body)
		}
	}
	g, err := c.l.get(sub, 0)
	status, body := g.status, g.body
	c.l.checkPage(sub, g)
	var op operation
	switch {
	case err != nil || status != http.StatusOK:
		p.violate(invLost, "%s: GET operation after the drain: %d %s %v", sub.id(), status, body, err)
	case json.Unmarshal(body, &op) != nil:
		p.violate(invWellFormed, "%s: GET operation: %s", sub.id(), body)
	case row.state == lead.KeyCompleted || row.state == lead.KeyFailed:
		if op.Response == nil || op.Response.Status != final.status || !bytes.Equal(op.Response.Body, final.body) {
			p.violate(invReplay, "%s: the replayed body %s differs from the operation's response %s", sub.id(), final.body, body)
		}
	}

	sub.mu.Lock()
	answers := append([]answer(nil), sub.answers...)
	blind := append([]answer(nil), sub.blind...)
	polled := append([]string(nil), sub.polled...)
	sub.mu.Unlock()

	// Every lead id the client was told is the stored one.
	for _, a := range answers {
		if a.leadID != "" && a.leadID != row.leadID {
			p.violate(invLeadID, "%s: a %d named lead %s; the key holds %s", sub.id(), a.status, a.leadID, row.leadID)
		}
	}
	for _, id := range polled {
		if id != row.leadID {
			p.violate(invLeadID, "%s: GET operation named lead %s; the key holds %s", sub.id(), id, row.leadID)
		}
	}

	// Every final answer seen during the run is the stored one. A 502 may
	// be re-opened by a later retry (the soak's, or a dropped one), and
	// then differ.
	for _, a := range answers {
		if a.afterDrain {
			continue // checked above
		}
		switch a.status {
		case http.StatusCreated, http.StatusUnprocessableEntity:
			if a.status != row.status || !sameFinal(sub, a.body, row.body) {
				p.violate(invReplay, "%s: a %d during the run %s; stored %d %s", sub.id(), a.status, a.body, row.status, row.body)
			}
		case http.StatusBadGateway:
			if a.status == row.status && sameFinal(sub, a.body, row.body) {
				continue
			}
			if !reopenedAfter(a, answers, blind) {
				p.violate(invReplay, "%s: a 502 during the run %s, never re-opened; stored %d %s", sub.id(), a.body, row.status, row.body)
			}
		}
	}
}

// reopenedAfter reports whether a request of the key could have re-opened
// it after the 502 a was sent: a 202 that says it was not a replay, or a
// request whose answer the client never read.
func reopenedAfter(a answer, answers, blind []answer) bool {
	for _, x := range answers {
		if x.status == http.StatusAccepted && x.replayed == "false" && x.received.After(a.sent) {
			return true
		}
	}
	for _, x := range blind {
		if x.received.After(a.sent) {
			return true
		}
	}
	return false
}

// checkLeads checks the leads table: one lead per key, the key's.
func (c *checker) checkLeads(ctx context.Context) {
	rows, err := c.s.pool.Query(ctx, `
SELECT l.client_id, l.idempotency_key, count(*), bool_and(l.id = k.lead_id)
FROM leads l LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key
GROUP BY 1, 2`)
	if err != nil {
		c.p.violate(invOneLead, "read the leads: %v", err)
		return
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var client, key string
		var count int
		var matches *bool
		if err := rows.Scan(&client, &key, &count, &matches); err != nil {
			c.p.violate(invOneLead, "read the leads: %v", err)
			return
		}
		n++
		if count != 1 || matches == nil || !*matches {
			c.p.violate(invOneLead, "%s/%s: %d leads (all the key's own: %v)", client, key, count, matches != nil && *matches)
		}
	}
	if n != len(c.rows) {
		c.p.violate(invOneLead, "%d keys with leads, %d keys", n, len(c.rows))
	}
}

// checkDownstream checks what the fake received against the keys.
func (c *checker) checkDownstream(subs []*submission) {
	p := c.p
	st := c.s.fake.State()
	refs := map[string]string{} // external_ref -> the chain's first submission's id
	chained := map[string]bool{}
	notifyKeys := map[string]bool{}
	for _, sub := range subs {
		refs[chainRef(sub)] = sub.chainRoot().id()
		notifyKeys[notifyKey(sub)] = true
		if sub.depth > 0 {
			chained[chainRef(sub)] = true
		}
	}
	// The destinations phase's CRMs are the vendors' (checkVendors).
	for ref, rec := range st.CRM {
		if p.vendors {
			p.violate(invOneCRM, "a record under %s in the environment's CRM, which no tenant of the phase uses", ref)
			continue
		}
		id, ok := refs[ref]
		switch {
		case !ok:
			p.violate(invOneCRM, "a CRM record under %s, which is no key's", ref)
		case rec.Records != 1 && chained[ref]:
			p.violate(invAmendCRM, "the chain of %s: %d CRM records %v", id, rec.Records, rec.IDs)
		case rec.Records != 1:
			p.violate(invOneCRM, "%s: %d CRM records %v", id, rec.Records, rec.IDs)
		}
	}
	for key, n := range st.Notifications {
		if !notifyKeys[key] {
			p.violate(invOneNotify, "a notification under %q, which is no key's", key)
			continue
		}
		ref, _, _ := strings.Cut(key, ":notify")
		c.deliveries += n.Deliveries
		if n.Deliveries > 1 {
			c.redelivered++
			if c.faults.unansweredDeliveries(ref) >= n.Deliveries-1 {
				c.explained++
			}
		}
	}
	c.notifications = len(st.Notifications)

	for _, sub := range subs {
		row := c.rows[sub.id()]
		if row == nil || row.state != lead.KeyCompleted {
			continue
		}
		ref := chainRef(sub)
		var body struct {
			CRMID    string `json:"crm_id"`
			Notified bool   `json:"notified"`
		}
		if err := json.Unmarshal(row.body, &body); err != nil {
			p.violate(invWellFormed, "%s: stored body %s", sub.id(), row.body)
			continue
		}
		inv := invOneCRM
		if chained[ref] {
			inv = invAmendCRM
		}
		if rec, ok := st.CRM[ref]; !p.vendors && (!ok || len(rec.IDs) == 0 || rec.IDs[0] != body.CRMID) {
			p.violate(inv, "%s: completed with crm_id %q; the CRM holds %+v", sub.id(), body.CRMID, rec)
		}
		if _, ok := st.Notifications[notifyKey(sub)]; body.Notified && !ok {
			p.violate(invOneNotify, "%s: notified, and the notification service has nothing under %s", sub.id(), notifyKey(sub))
		}
	}
}

// scanLogs reads the processes' output for 5xx answers the clients may
// not have seen (their connections dropped) and for panics.
func (c *checker) scanLogs() {
	for name, out := range map[string]string{"api": c.s.api.Output()} {
		for line := range strings.Lines(out) {
			var ev struct {
				Msg    string `json:"msg"`
				Status int    `json:"status"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil {
				if strings.Contains(line, "panic") {
					c.p.violate(invNo500, "%s printed: %s", name, strings.TrimSpace(line))
				}
				continue
			}
			if ev.Msg == "request" && ev.Status >= 500 && ev.Status != http.StatusServiceUnavailable {
				c.p.violate(invNo500, "%s logged: %s", name, strings.TrimSpace(line))
			}
			if ev.Msg == "panic" {
				c.p.violate(invNo500, "%s logged: %s", name, strings.TrimSpace(line))
			}
		}
	}
	c.workerEvents = map[string]int{}
	for i, w := range c.s.workers {
		out := w.Output() // every run of it
		if strings.Contains(out, "panic:") || strings.Contains(out, `"msg":"panic"`) {
			c.p.violate(invProcesses, "worker %d panicked", i+1)
		}
		for line := range strings.Lines(out) {
			var ev struct {
				Msg     string `json:"msg"`
				Outcome string `json:"outcome"`
				Action  string `json:"action"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch ev.Msg {
			case "lead finished":
				c.workerEvents["finished "+ev.Outcome]++
			case "lead reconciled":
				c.workerEvents["reconciled "+ev.Action]++
			case "lead finished by the reconciler: its job ended without a final response":
				c.workerEvents["orphan finished "+ev.Outcome]++
			}
		}
	}
	c.p.stats.mu.Lock()
	for _, e := range c.p.stats.restartErrors {
		c.p.violate(invProcesses, "worker restart: %s", e)
	}
	c.p.stats.mu.Unlock()
}
