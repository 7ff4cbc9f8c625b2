package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/lead"
)

// The checks of what the soak does besides plain submissions: amendments,
// callbacks, erasures, waits and (in load.go) a page's answers.

const (
	// waitMargin bounds, from outside, how long a finishing transaction
	// may run after its finished_at (the start of its transaction): a
	// wait answered "processing" more than this after its key's
	// finished_at is wrong.
	waitMargin = 500 * time.Millisecond
	// heldSlack is how much sooner than asked an unfinished key's wait may
	// end (the timer starts once the api has the request).
	heldSlack = 250 * time.Millisecond
	// callGrace is the time a downstream call that the worker started
	// before an erasure returned may take to reach the fake.
	callGrace = 100 * time.Millisecond
)

// chainRef is the external reference of the submission's lead: its
// chain's first key's.
func chainRef(sub *submission) string {
	root := sub.chainRoot()
	return intake.ExternalRef(root.client, root.key)
}

// notifyKey is the Idempotency-Key of the submission's notification.
func notifyKey(sub *submission) string {
	if sub.depth == 0 {
		return chainRef(sub) + ":notify"
	}
	return chainRef(sub) + ":notify:" + strconv.Itoa(sub.depth)
}

// completed is a stored completed body.
type completed struct {
	LeadID   string   `json:"lead_id"`
	CRMID    string   `json:"crm_id"`
	Notified bool     `json:"notified"`
	Warnings []string `json:"warnings"`
	Amends   string   `json:"amends"`
}

func completedBody(body []byte) completed {
	var c completed
	_ = json.Unmarshal(body, &c)
	return c
}

func (c completed) warned(code string) bool {
	for _, w := range c.Warnings {
		if w == code {
			return true
		}
	}
	return false
}

// sameFinal reports whether got is the stored final body as the
// submission's caller sees it: byte for byte, or for a page its
// projection (the status, the lead id and the error of the stored body).
func sameFinal(sub *submission, got, stored []byte) bool {
	if !sub.page {
		return string(got) == string(stored)
	}
	if projected(got) != nil {
		return false
	}
	type view struct {
		Status string `json:"status"`
		LeadID string `json:"lead_id"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	var a, b view
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(stored, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// checkAmendments checks each amendment chain: its leads share the first
// lead's external reference, the CRM holds one record under it, every
// completed lead of the chain names that record, and in upsert mode the
// record was last written by the chain's last lead when it completed.
func (c *checker) checkAmendments(subs []*submission) {
	p := c.p
	chains := map[*submission][]*submission{}
	for _, sub := range subs {
		if sub.depth > 0 {
			root := sub.chainRoot()
			if chains[root] == nil {
				chains[root] = []*submission{root}
			}
			chains[root] = append(chains[root], sub)
		}
	}
	st := c.s.fake.State()
	for root, chain := range chains {
		c.chains++
		ref := chainRef(root)
		var last *submission
		for _, sub := range chain {
			row := c.rows[sub.id()]
			if row == nil {
				continue
			}
			if row.externalRef != ref {
				p.violate(invAmendCRM, "%s (amendment %d of %s): external_ref %q, want the chain's %q", sub.id(), sub.depth, root.id(), row.externalRef, ref)
			}
			if last == nil || sub.depth > last.depth {
				last = sub
			}
			if sub.depth > 0 && row.state == lead.KeyCompleted {
				if b := completedBody(row.body); b.Amends == "" {
					p.violate(invAmendCRM, "%s: an amendment completed without amends: %s", sub.id(), row.body)
				}
			}
		}
		if c.p.vendors {
			if len(c.vendorRecords(root)) > 0 {
				c.chainsInCRM++
			}
			continue
		}
		rec, ok := st.CRM[ref]
		if !ok {
			continue
		}
		c.chainsInCRM++
		if c.p.crmMode != "upsert" || last == nil {
			continue
		}
		row := c.rows[last.id()]
		if b := completedBody(row.body); row.state == lead.KeyCompleted && !b.warned("crm_not_updated") {
			var written struct {
				LeadID string `json:"lead_id"`
			}
			if json.Unmarshal(rec.LastBody, &written) != nil || written.LeadID != row.leadID {
				p.violate(invAmendCRM, "the chain of %s: its last lead %s completed, and the CRM's record was last written by lead %q",
					root.id(), row.leadID, written.LeadID)
			}
		}
	}
}

// checkCallbacks checks every finish's callback against what the receiver
// got: each row of the callbacks table (one per finish) reached the
// receiver under its webhook-id, on its client's path, signed, and was
// delivered; the receiver got nothing else; and each finished key's last
// finish announced its stored response.
func (c *checker) checkCallbacks(ctx context.Context) {
	p := c.p
	rows, err := c.s.pool.Query(ctx, `
SELECT id::text, client_id, lead_id::text, payload::text, delivered_at IS NOT NULL, given_up_at IS NOT NULL, attempts
FROM callbacks`)
	if err != nil {
		p.violate(invCallbacks, "read the callbacks: %v", err)
		return
	}
	type finish struct {
		status int
		body   json.RawMessage
	}
	announced := map[string][]finish{} // client/lead id -> the finishes announced
	st := c.s.fake.State()
	known := map[string]bool{}
	for rows.Next() {
		var id, client, leadID, payload string
		var delivered, givenUp bool
		var attempts int
		if err := rows.Scan(&id, &client, &leadID, &payload, &delivered, &givenUp, &attempts); err != nil {
			p.violate(invCallbacks, "read the callbacks: %v", err)
			rows.Close()
			return
		}
		c.callbackRows++
		wid := "msg_" + strings.ReplaceAll(id, "-", "")
		known[wid] = true
		var msg struct {
			Type string `json:"type"`
			Data struct {
				Key      string `json:"idempotency_key"`
				LeadID   string `json:"lead_id"`
				Response struct {
					Status int             `json:"status"`
					Body   json.RawMessage `json:"body"`
				} `json:"response"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(payload), &msg); err != nil || msg.Data.LeadID != leadID {
			p.violate(invCallbacks, "%s: payload %s for lead %s", wid, payload, leadID)
			continue
		}
		if row := c.rows[client+"/"+msg.Data.Key]; row == nil || row.leadID != leadID {
			p.violate(invCallbacks, "%s: announces %s/%s of lead %s, which is no such key's", wid, client, msg.Data.Key, leadID)
		}
		announced[client+"/"+leadID] = append(announced[client+"/"+leadID], finish{msg.Data.Response.Status, msg.Data.Response.Body})
		got, ok := st.Callbacks[wid]
		switch {
		case !ok || got.Deliveries == 0:
			p.violate(invCallbacks, "%s (%s, %s): never reached the receiver (delivered %v, given up %v, %d attempts)", wid, client, msg.Type, delivered, givenUp, attempts)
			continue
		case got.Client != client:
			p.violate(invCallbacks, "%s: a finish of %s reached the receiver of %s", wid, client, got.Client)
		case !got.Verified:
			problem := ""
			for _, a := range got.Attempts {
				if !a.Verified {
					problem = a.Problem
				}
			}
			p.violate(invCallbacks, "%s: an attempt did not verify: %s", wid, problem)
		case got.Type != msg.Type:
			p.violate(invCallbacks, "%s: the receiver got type %q, the finish was %q", wid, got.Type, msg.Type)
		}
		if !delivered {
			p.violate(invCallbacks, "%s: not delivered after the drain (given up %v, %d attempts)", wid, givenUp, attempts)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		p.violate(invCallbacks, "read the callbacks: %v", err)
	}
	c.callbackMsgs = len(st.Callbacks)
	c.callbackTries = st.Totals.CallbackDeliveries
	for wid := range st.Callbacks {
		if !known[wid] {
			p.violate(invCallbacks, "the receiver got %s, which is no finish's", wid)
		}
	}
	for id, row := range c.rows {
		if row.state != lead.KeyCompleted && row.state != lead.KeyFailed {
			continue
		}
		client, _, _ := strings.Cut(id, "/")
		found := false
		for _, f := range announced[client+"/"+row.leadID] {
			found = found || (f.status == row.status && jsonEqual(f.body, row.body))
		}
		if !found {
			p.violate(invCallbacks, "%s: its finish %d %s was never announced (%d finishes of its lead announced)", id, row.status, row.body, len(announced[client+"/"+row.leadID]))
		}
	}
}

// checkErasures checks each lead erased during the run: its personal data
// is gone from its row and appears nowhere else (its key's response, its
// callbacks, any job, the processes' output); its key had finished by the
// time the erasure returned and stayed so; and no downstream call of it
// arrived after the erasure returned (one started before may finish).
func (c *checker) checkErasures(ctx context.Context, subs []*submission) {
	p := c.p
	var output strings.Builder
	output.WriteString(c.s.api.Output())
	for _, w := range c.s.workers {
		output.WriteString(w.Output())
	}
	logs := output.String()
	for _, sub := range subs {
		sub.mu.Lock()
		at, via := sub.erasedAt, sub.erasedVia
		sub.mu.Unlock()
		if at.IsZero() {
			continue
		}
		c.erased++
		row := c.rows[sub.id()]
		if row == nil {
			p.violate(invErased, "%s: erased, and its key is not in the database", sub.id())
			continue
		}
		email := sub.lead.email()
		var erased, clean bool
		err := c.s.pool.QueryRow(ctx, `
SELECT erased_at IS NOT NULL, submission IS NULL AND enrichment IS NULL AND email_hmac IS NULL FROM leads WHERE id = $1`,
			row.leadID).Scan(&erased, &clean)
		if err != nil || !erased || !clean {
			p.violate(invErased, "%s (erased by %s): lead row erased %v, its personal data gone %v (%v)", sub.id(), via, erased, clean, err)
		}
		var inJobs, inCallbacks int
		like := "%" + email + "%"
		err = c.s.pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM river_job WHERE args::text LIKE $1 OR errors::text LIKE $1),
       (SELECT count(*) FROM callbacks WHERE payload::text LIKE $1)`, like).Scan(&inJobs, &inCallbacks)
		if err != nil || inJobs > 0 || inCallbacks > 0 || strings.Contains(string(row.body), email) {
			p.violate(invErased, "%s: its email is in %d jobs, %d callbacks, its response %v (%v)", sub.id(), inJobs, inCallbacks, strings.Contains(string(row.body), email), err)
		}
		if strings.Contains(logs, email) {
			p.violate(invErased, "%s: its email is in the processes' output", sub.id())
		}
		switch {
		case row.finishedAt == nil:
			p.violate(invErased, "%s: %s after its erasure", sub.id(), row.state)
		case row.finishedAt.After(at):
			p.violate(invErased, "%s: finished (%s %s) %s after its erasure returned", sub.id(), row.state, row.failureCode, row.finishedAt.Sub(at))
		case row.failureCode == "erased":
			c.erasedUnfinished++
		default:
			c.erasedFinished++
		}
		c.erasedEarlyCalls += len(c.s.calls.of(row.leadID, chainRef(sub), time.Time{})) - len(c.s.calls.of(row.leadID, chainRef(sub), at))
		for _, call := range c.s.calls.of(row.leadID, chainRef(sub), at) {
			late := call.at.Sub(at)
			if late <= callGrace {
				c.erasedGraceCalls++
				continue
			}
			c.erasedLateCalls++
			p.violate(invErased, "%s (erased by %s): a %s call arrived %s after its erasure returned", sub.id(), via, call.target, late.Round(time.Millisecond))
		}
	}
}

// checkWaits checks every answer to a request that asked to wait. One
// that said the key was unfinished must have been held the time asked,
// and its key must not have finished (for good: finished_at is its last
// finish) more than waitMargin before the hold ended, which was no sooner
// than sent + the wait applied. One that gave a final response gave the
// stored one (a 502 may have been re-opened since).
func (c *checker) checkWaits(subs []*submission) {
	p := c.p
	for _, sub := range subs {
		row := c.rows[sub.id()]
		sub.mu.Lock()
		waits := append([]waitAnswer(nil), sub.waits...)
		sub.mu.Unlock()
		if row == nil {
			continue
		}
		for _, w := range waits {
			asked := time.Duration(w.waited) * time.Second
			if !w.unfinished() {
				c.waitsFinal++
				if (w.status == http.StatusCreated || w.status == http.StatusUnprocessableEntity) && !sameFinal(sub, w.body, row.body) {
					p.violate(invWait, "%s: %s waited, answered %d %s; stored %d %s", sub.id(), w.method, w.status, w.body, row.status, row.body)
				}
				continue
			}
			c.waitsUnfinished++
			dbDown := p.stats.dbDownDuring(w.sent, w.received)
			if dbDown {
				c.waitsDuringDB++
			}
			note := ""
			if dbDown {
				note = " (the api's database was cut meanwhile)"
			}
			if held := w.received.Sub(w.sent); held < asked-heldSlack {
				p.violate(invWait, "%s: %s with wait=%d answered %s after %s, unfinished%s", sub.id(), w.method, w.waited, w.state, held.Round(time.Millisecond), note)
			}
			if row.finishedAt != nil {
				if by := w.sent.Add(asked).Sub(*row.finishedAt); by > waitMargin {
					p.violate(invWait, "%s: %s with wait=%d answered %s %s after its key finished (%s %s)%s",
						sub.id(), w.method, w.waited, w.state, by.Round(time.Millisecond), row.state, row.failureCode, note)
				}
			}
		}
	}
}

// featureLines are the report's lines on the checks above.
func (c *checker) featureLines() []string {
	ld := &c.p.load
	return []string{
		fmt.Sprintf("amendments           %d, in %d chains (%d with a CRM record)", ld.amendments.Load(), c.chains, c.chainsInCRM),
		fmt.Sprintf("page submissions     %d (publishable key, origin %s); %d 429s; %d final answers to a page checked after the drain",
			ld.pages.Load(), pageOrigin, ld.rateLimited.Load(), c.pageAnswers),
		fmt.Sprintf("waits                %d POSTs and %d polls with Prefer: wait; %d answered unfinished (%d while the api's database was cut), %d final",
			ld.waitPosts.Load(), ld.waitPolls.Load(), c.waitsUnfinished, c.waitsDuringDB, c.waitsFinal),
		fmt.Sprintf("erasures             %d during the load: %d finished by the erasure, %d already finished; their leads' downstream calls: %d before the erasure returned, %d after (%d past %s)",
			c.erased, c.erasedUnfinished, c.erasedFinished, c.erasedEarlyCalls, c.erasedLateCalls+c.erasedGraceCalls, c.erasedLateCalls, callGrace),
		fmt.Sprintf("callbacks            %d finishes, %d webhook-ids at the receiver, %d attempts", c.callbackRows, c.callbackMsgs, c.callbackTries),
	}
}
