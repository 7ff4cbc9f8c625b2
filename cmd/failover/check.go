package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/intake"
)

// The promises, in the order they are reported.
const (
	promiseServes    = "the api answers 503 store_unavailable, then serves again (no other 5xx)"
	promiseWorker    = "the worker resumes"
	promiseKept      = "every key answered 202 or final exists afterwards, with the same answer"
	promiseOnce      = "every lead completes once: one CRM record, one notification"
	promiseProcesses = "the api and the worker run on, and stop cleanly"
)

var promises = []string{promiseServes, promiseWorker, promiseKept, promiseOnce, promiseProcesses}

const maxShown = 8

// checker drains a run and checks it.
type checker struct {
	d    *drill
	s    *stack
	l    *load
	pool *pgxpool.Pool

	drained string
	rows    map[string]*keyRow
	lost    []lostKey
	// servedAgain is when the api served again (checkAvailability); zero
	// if it never did.
	servedAgain   time.Time
	workerResumed time.Time
	finishedAfter int
	accepted      int
	redelivered   int
	orphanRecords int
}

type keyRow struct {
	state    string
	leadID   string
	status   int
	body     []byte
	finished *time.Time
}

// lostKey is an accepted key that the database no longer holds as it was
// answered.
type lostKey struct {
	key  string
	sent time.Time // the request that got its first 202 or final answer
	how  string
}

// drain waits until no key is processing, or -drain passes.
func (c *checker) drain(ctx context.Context) {
	start := time.Now()
	for {
		var processing int
		err := c.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state IN ('processing', 'needs_reconciliation')`).Scan(&processing)
		if err == nil && processing == 0 {
			c.drained = fmt.Sprintf("drained in %s", time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Since(start) > c.d.o.drain || ctx.Err() != nil {
			c.drained = fmt.Sprintf("NOT drained within %s: %d keys unfinished (%v)", c.d.o.drain, processing, err)
			c.d.fail(promiseWorker, "%d keys still unfinished %s after the load", processing, c.d.o.drain)
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func (c *checker) loadRows(ctx context.Context) error {
	rows, err := c.pool.Query(ctx, `
SELECT key, state, lead_id::text, coalesce(response_status, 0), response_body, finished_at
FROM idempotency_keys WHERE client_id = $1`, clientID)
	if err != nil {
		return err
	}
	defer rows.Close()
	c.rows = map[string]*keyRow{}
	for rows.Next() {
		var key string
		var status int16
		r := &keyRow{}
		if err := rows.Scan(&key, &r.state, &r.leadID, &status, &r.body, &r.finished); err != nil {
			return err
		}
		r.status = int(status)
		c.rows[key] = r
	}
	return rows.Err()
}

func (c *checker) check(ctx context.Context) {
	d := c.d
	if err := c.loadRows(ctx); err != nil {
		d.fail(promiseKept, "read the keys: %v", err)
		return
	}
	subs := c.l.submissions()
	for _, sub := range subs {
		c.checkKey(ctx, sub)
	}
	c.checkLeads(ctx)
	c.checkDownstream(subs)
	c.checkAvailability()

	// The new primary takes writes once its promotion is over.
	promotedBy := d.promoted.Add(d.promoteTook)
	for _, r := range c.rows {
		if r.finished != nil && r.finished.After(promotedBy) {
			c.finishedAfter++
			if c.workerResumed.IsZero() || r.finished.Before(c.workerResumed) {
				c.workerResumed = *r.finished
			}
		}
	}
	if c.workerResumed.IsZero() {
		d.fail(promiseWorker, "no key finished after the failover")
	}
}

// checkKey checks one key against its row: the key exists, with the lead
// every answer named, its final answer the one answered, and a retry
// replays it.
func (c *checker) checkKey(ctx context.Context, sub *submission) {
	sub.mu.Lock()
	first := sub.accepted
	answers := append([]answer(nil), sub.answers...)
	notFound := sub.notFound
	sub.mu.Unlock()
	if first == nil {
		return // never answered: reported with the unexpected answers
	}
	c.accepted++
	row := c.rows[sub.key]
	lose := func(how string) {
		c.lost = append(c.lost, lostKey{key: sub.key, sent: first.sent, how: how})
	}
	switch {
	case row == nil:
		lose("missing")
		return
	case first.leadID != row.leadID:
		lose(fmt.Sprintf("a new lead: answered %s, now %s", first.leadID, row.leadID))
		return
	}
	if notFound > 0 {
		c.d.fail(promiseKept, "%s: accepted, and %d poll(s) answered 404 (read on a server that no longer takes writes?)", sub.key, notFound)
	}
	for _, a := range answers {
		if a.leadID != "" && a.leadID != row.leadID {
			lose(fmt.Sprintf("a %s %d named lead %s, the key holds %s", a.method, a.status, a.leadID, row.leadID))
			return
		}
		if a.method == http.MethodPost && a.status != http.StatusAccepted && acceptedStatus(a) &&
			(a.status != row.status || !bytes.Equal(a.body, row.body)) {
			lose(fmt.Sprintf("answered %d %s, now %d %s", a.status, a.body, row.status, row.body))
			return
		}
	}
	if row.state != "completed" && row.state != "failed" {
		return // reported by the drain
	}
	// A retry now replays it, byte for byte.
	for range 30 {
		a, ok := c.l.do(http.MethodPost, "/v1/leads", http.Header{"Idempotency-Key": {sub.key}, "Content-Type": {"application/json"}}, sub.body)
		if !ok {
			sleep(ctx, time.Second)
			continue
		}
		if a.status != row.status || a.replayed != "true" || !bytes.Equal(a.body, row.body) {
			c.d.fail(promiseKept, "%s: the retry got %d replayed=%q %s; stored %d %s", sub.key, a.status, a.replayed, a.body, row.status, row.body)
		}
		return
	}
	c.d.fail(promiseServes, "%s: the retry after the drain was never served", sub.key)
}

// checkLeads checks the leads table: one lead per key, the key's.
func (c *checker) checkLeads(ctx context.Context) {
	rows, err := c.pool.Query(ctx, `
SELECT l.idempotency_key, count(*), bool_and(l.id = k.lead_id)
FROM leads l LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key
WHERE l.client_id = $1 GROUP BY 1`, clientID)
	if err != nil {
		c.d.fail(promiseOnce, "read the leads: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var n int
		var matches *bool
		if err := rows.Scan(&key, &n, &matches); err != nil {
			c.d.fail(promiseOnce, "read the leads: %v", err)
			return
		}
		if n != 1 || matches == nil || !*matches {
			c.d.fail(promiseOnce, "%s: %d leads (the key's own: %v)", key, n, matches != nil && *matches)
		}
	}
}

// checkDownstream checks the fake's state against the keys: one CRM record
// per completed key, the one its response names, and its notification.
func (c *checker) checkDownstream(subs []*submission) {
	st := c.s.fake.State()
	refs := map[string]string{}
	for _, sub := range subs {
		refs[intake.ExternalRef(clientID, sub.key)] = sub.key
	}
	for ref, rec := range st.CRM {
		key, ok := refs[ref]
		switch {
		case !ok:
			c.d.fail(promiseOnce, "a CRM record under %s, which is no key's", ref)
		case rec.Records != 1:
			c.d.fail(promiseOnce, "%s: %d CRM records %v", key, rec.Records, rec.IDs)
		case c.rows[key] == nil:
			c.orphanRecords++ // a lost key's lead reached the CRM before the failover
		}
	}
	for nkey, n := range st.Notifications {
		if n.Deliveries > 1 {
			c.redelivered++ // the same Idempotency-Key: the service de-duplicates
		}
		if ref, ok := strings.CutSuffix(nkey, ":notify"); !ok || refs[ref] == "" {
			c.d.fail(promiseOnce, "a notification under %q, which is no key's", nkey)
		}
	}
	for key, row := range c.rows {
		if row.state != "completed" {
			continue
		}
		var body struct {
			CRMID    string `json:"crm_id"`
			Notified bool   `json:"notified"`
		}
		if err := json.Unmarshal(row.body, &body); err != nil {
			c.d.fail(promiseOnce, "%s: stored body %s", key, row.body)
			continue
		}
		ref := intake.ExternalRef(clientID, key)
		if rec, ok := st.CRM[ref]; !ok || len(rec.IDs) != 1 || rec.IDs[0] != body.CRMID {
			c.d.fail(promiseOnce, "%s: completed with crm_id %q; the CRM holds %+v", key, body.CRMID, rec)
		}
		if _, ok := st.Notifications[ref+":notify"]; !body.Notified || !ok {
			c.d.fail(promiseOnce, "%s: notified=%v, notification received: %v", key, body.Notified, ok)
		}
	}
}

// checkAvailability finds when the api served again: the first answer to
// a request sent after the promotion and after the last request that was
// not served (a 503, a 5xx, no answer) had been sent. (With the old
// primary still up, requests to it may hang rather than fail: they count
// as served when they are, on the new primary.) It reports every
// answer that was neither served nor a 503 store_unavailable.
func (c *checker) checkAvailability() {
	l := c.l
	l.mu.Lock()
	from := c.d.promoted
	for _, o := range l.outages {
		if o.sent.After(from) {
			from = o.sent
		}
	}
	for _, u := range l.unexpected {
		c.d.fail(promiseServes, "%s", u)
	}
	l.mu.Unlock()
	for _, sub := range l.submissions() {
		sub.mu.Lock()
		for _, a := range sub.answers {
			if a.status < 500 && a.sent.After(from) && (c.servedAgain.IsZero() || a.received.Before(c.servedAgain)) {
				c.servedAgain = a.received
			}
		}
		sub.mu.Unlock()
	}
	if c.servedAgain.IsZero() {
		c.d.fail(promiseServes, "nothing sent after the last failed request was served")
	}
}

// scanLogs reads the api's log for 5xx answers other than 503 (the
// client may not have read them all) and both processes' for panics.
func (c *checker) scanLogs() {
	for line := range strings.Lines(c.s.api.Output()) {
		var ev struct {
			Msg    string `json:"msg"`
			Status int    `json:"status"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Msg == "request" && ev.Status >= 500 && ev.Status != http.StatusServiceUnavailable || ev.Msg == "internal error" || ev.Msg == "panic" {
			c.d.fail(promiseServes, "api logged: %s", strings.TrimSpace(line))
		}
	}
	for name, out := range map[string]string{"api": c.s.api.Output(), "worker": c.s.worker.Output()} {
		if strings.Contains(out, "panic:") || strings.Contains(out, `"msg":"panic"`) {
			c.d.fail(promiseProcesses, "%s panicked", name)
		}
	}
}
