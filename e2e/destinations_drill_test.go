package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/internal/vendors"
)

// drillSize is how big the destinations' drills are. The default keeps
// make test short; LEADINTAKE_E2E_DRILL=full runs the sizes the drills'
// figures are reported for (docs/destinations/drills.md): 200 leads, a
// 30 s outage, 50 lost answers, two workers. LEADINTAKE_E2E_DRILL_LEADS,
// _OUTAGE (a duration) and _LOST set one each.
type drillSize struct {
	leads   int
	outage  time.Duration
	lost    int
	workers int
}

func drillSizes(t *testing.T) drillSize {
	t.Helper()
	d := drillSize{leads: 30, outage: 5 * time.Second, lost: 10, workers: 1}
	if os.Getenv("LEADINTAKE_E2E_DRILL") == "full" {
		d = drillSize{leads: 200, outage: 30 * time.Second, lost: 50, workers: 2}
	}
	if v, err := strconv.Atoi(os.Getenv("LEADINTAKE_E2E_DRILL_LEADS")); err == nil && v > 0 {
		d.leads = v
	}
	if v, err := time.ParseDuration(os.Getenv("LEADINTAKE_E2E_DRILL_OUTAGE")); err == nil && v > 0 {
		d.outage = v
	}
	if v, err := strconv.Atoi(os.Getenv("LEADINTAKE_E2E_DRILL_LOST")); err == nil && v >= 0 {
		d.lost = v
	}
	if d.lost*2 > d.leads {
		t.Fatalf("%d lost answers for %d leads: the drill needs at least two writes per lost answer", d.lost, d.leads)
	}
	return d
}

// lostAnswers are n lost answers (the write applied, the connection
// dropped), each followed by a write answered: spread over the recovery,
// not n failures in a row.
func lostAnswers(n int) []standin.Fault {
	var out []standin.Fault
	for range n {
		out = append(out, standin.Fault{DropAfterApply: true}, standin.Fault{})
	}
	return out
}

// downFor is every call of targets failing with 503 (on), or answered
// again.
func downFor(kit interface {
	SetChaos(string, standin.Chaos) error
}, on bool, targets ...string) error {
	c := standin.Chaos{}
	if on {
		c = standin.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}
	}
	for _, target := range targets {
		if err := kit.SetChaos(target, c); err != nil {
			return err
		}
	}
	return nil
}

// crmDrill is the drill of one CRM kind: what its destination is, how its
// stand-in goes down and loses answers, and what it holds afterwards.
type crmDrill struct {
	name string
	// dest is the destination "drill-crm" on the stand-ins v (or the stack's
	// fake downstream).
	dest func(v *standins, s *stack) dest
	// down takes every call down (on) or up; lose scripts n lost answers
	// on the write(s); writes counts the writes received so far, calls
	// every request.
	down   func(v *standins, s *stack, on bool) error
	lose   func(v *standins, s *stack, n int)
	writes func(v *standins, s *stack) int
	calls  func(v *standins, s *stack) int
	// records returns the records the CRM holds under each reference
	// (their ids), and the number of records in all.
	records func(v *standins, s *stack, refs map[string]int) (byRef map[string][]string, total int)
}

var crmDrills = []crmDrill{
	{
		name: "hubspot",
		dest: func(v *standins, _ *stack) dest {
			return dest{name: "drill-crm", kind: "hubspot", members: map[string]string{"base_url": v.base(vendors.HubSpot), "token": hubspotfake.DefaultToken}}
		},
		down: func(v *standins, _ *stack, on bool) error {
			return downFor(v.HubSpot.Kit(), on, hubspotfake.Targets...)
		},
		lose: func(v *standins, _ *stack, n int) { v.HubSpot.Script(hubspotfake.TargetUpsert, lostAnswers(n)...) },
		writes: func(v *standins, _ *stack) int {
			return v.HubSpot.State().Requests[hubspotfake.TargetUpsert]
		},
		calls: func(v *standins, _ *stack) int { return sum(v.HubSpot.State().Requests) },
		// HubSpot writes a contact per email: the lead i's is lead{i}@.
		records: func(v *standins, _ *stack, refs map[string]int) (map[string][]string, int) {
			out := map[string][]string{}
			for ref, i := range refs {
				if c, ok := v.HubSpot.ContactByEmail(fmt.Sprintf("lead%d@example.com", i)); ok {
					out[ref] = []string{c.ID}
				}
			}
			return out, v.HubSpot.Records()
		},
	},
	{
		name: "salesforce",
		dest: func(v *standins, _ *stack) dest {
			return dest{name: "drill-crm", kind: "salesforce", members: map[string]string{
				"base_url": v.base(vendors.Salesforce), "instance_url": "https://drill.my.salesforce.com",
				"client_id": salesforcefake.DefaultClientID, "client_secret": salesforcefake.DefaultClientSecret,
			}}
		},
		down: func(v *standins, _ *stack, on bool) error {
			return downFor(v.Salesforce, on, salesforcefake.Targets()...)
		},
		lose: func(v *standins, _ *stack, n int) {
			v.Salesforce.Script(salesforcefake.TargetUpsert, lostAnswers(n)...)
		},
		writes: func(v *standins, _ *stack) int {
			return v.Salesforce.State().Requests[salesforcefake.TargetUpsert]
		},
		calls: func(v *standins, _ *stack) int { return sum(v.Salesforce.State().Requests) },
		records: func(v *standins, _ *stack, refs map[string]int) (map[string][]string, int) {
			out := map[string][]string{}
			for ref := range refs {
				if ids := v.Salesforce.IDs(ref); len(ids) > 0 {
					out[ref] = ids
				}
			}
			return out, v.Salesforce.Count()
		},
	},
	{
		name: "pipedrive",
		dest: func(v *standins, _ *stack) dest {
			return dest{name: "drill-crm", kind: "pipedrive", members: map[string]string{
				"base_url": v.base(vendors.Pipedrive), "api_token": pipedrivefake.DefaultToken, "ref_field": pipedrivefake.DefaultRefField,
			}}
		},
		down: func(v *standins, _ *stack, on bool) error {
			return downFor(v.Pipedrive, on, pipedrivefake.Targets()...)
		},
		// Its two writes: the person's, then the lead's.
		lose: func(v *standins, _ *stack, n int) {
			v.Pipedrive.Script(pipedrivefake.TargetPersonsCreate, lostAnswers(n/2)...)
			v.Pipedrive.Script(pipedrivefake.TargetLeadsCreate, lostAnswers(n-n/2)...)
		},
		writes: func(v *standins, _ *stack) int {
			return v.Pipedrive.Requests(pipedrivefake.TargetPersonsCreate) + v.Pipedrive.Requests(pipedrivefake.TargetLeadsCreate)
		},
		calls: func(v *standins, _ *stack) int { return sum(v.Pipedrive.State().Requests) },
		records: func(v *standins, _ *stack, refs map[string]int) (map[string][]string, int) {
			out := map[string][]string{}
			leads := v.Pipedrive.Leads()
			for _, l := range leads {
				var ref string
				if json.Unmarshal(l.Custom[pipedrivefake.DefaultRefField], &ref) == nil {
					out[ref] = append(out[ref], l.ID)
				}
			}
			return out, len(leads)
		},
	},
	httpCRMDrill("upsert", fake.CRMUpsert),
	httpCRMDrill("create", fake.CRMCreate),
}

// httpCRMDrill is the drill of the http kind in mode, against the stack's
// fake downstream, whose write is target.
func httpCRMDrill(mode string, target fake.Target) crmDrill {
	return crmDrill{
		name: "http-" + mode,
		dest: func(_ *standins, s *stack) dest {
			return dest{name: "drill-crm", kind: "http", members: map[string]string{"url": s.fakeURL + "/crm", "mode": mode}}
		},
		down: func(_ *standins, s *stack, on bool) error {
			c := fake.Chaos{}
			if on {
				c = fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}
			}
			for _, t := range []fake.Target{fake.CRMUpsert, fake.CRMCreate, fake.CRMLookup} {
				if err := s.fake.SetChaos(t, c); err != nil {
					return err
				}
			}
			return nil
		},
		lose:   func(_ *standins, s *stack, n int) { s.fake.Script(target, lostAnswers(n)...) },
		writes: func(_ *standins, s *stack) int { return s.fake.Requests(target) },
		calls: func(_ *standins, s *stack) int {
			return s.fake.Requests(fake.CRMUpsert) + s.fake.Requests(fake.CRMCreate) + s.fake.Requests(fake.CRMLookup)
		},
		records: func(_ *standins, s *stack, refs map[string]int) (map[string][]string, int) {
			st := s.fake.State()
			out := map[string][]string{}
			for ref, r := range st.CRM {
				out[ref] = r.IDs
			}
			return out, st.Totals.CRMRecords
		},
	}
}

// keyRow is a key's final state as the database holds it.
type drillKey struct {
	state string
	body  completedBody
}

// drillKeys reads the keys of client.
func (s *stack) drillKeys(client string) map[string]drillKey {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT key, state, coalesce(response_body, '{}') FROM idempotency_keys WHERE client_id = $1`, client)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]drillKey{}
	for rows.Next() {
		var key, state string
		var body []byte
		if err := rows.Scan(&key, &state, &body); err != nil {
			s.t.Fatal(err)
		}
		k := drillKey{state: state}
		_ = json.Unmarshal(body, &k.body)
		out[key] = k
	}
	return out
}

// waitFinished waits until no key of client is processing, and returns
// how long it took.
func (s *stack) waitFinished(client string, timeout time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	testkit.EventuallyWithin(s.t, timeout, "every key of "+client+" finished", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE client_id = $1 AND state IN ('processing', 'needs_reconciliation')`, client) == 0
	})
	return time.Since(start)
}

// The CRM drill, per kind (HubSpot, Salesforce, Pipedrive, and http in
// upsert and create modes): leads arrive while the CRM is down (every call
// a 503), and wait; once it is back, its first writes lose their answers
// (applied, then the connection dropped), one write in two until the lost
// answers are spent. Every lead completes, and the CRM holds exactly one
// record per key, the one its crm_id names. See drillSizes for the sizes.
func TestCRMDrill(t *testing.T) {
	t.Parallel()
	size := drillSizes(t)
	for _, d := range crmDrills {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			runCRMDrill(t, d, size)
		})
	}
}

func runCRMDrill(t *testing.T, d crmDrill, size drillSize) {
	const (
		client = "drill"
		token  = "drill-client-token-0001"
		probe  = time.Second
	)
	v := startStandins(t, nil, vendors.HubSpot, vendors.Salesforce, vendors.Pipedrive)
	s := newStack(t, &stackOpts{workerEnv: []string{"JOB_MAX_ATTEMPTS=8", "PROBE_INTERVAL=" + probe.String(), "WORKER_CONCURRENCY=20"}})
	path := writeClients(t, clientsPath(t), []dest{d.dest(v, s)}, []fileClient{{id: client, token: token, crm: "drill-crm", notify: []string{}}})
	s.startAPI("CLIENTS_FILE="+path, "JOB_MAX_ATTEMPTS=8")
	for range size.workers {
		s.startWorker("CLIENTS_FILE=" + path)
	}

	if err := d.down(v, s, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	callsBefore := d.calls(v, s)
	keys := s.submitAll(token, "drill-"+d.name, 0, size.leads)
	refs := map[string]int{}
	for i, key := range keys {
		refs[intake.ExternalRef(client, key)] = i
	}
	testkit.EventuallyWithin(t, size.outage+30*time.Second, "every lead waiting for the CRM", func() bool {
		return s.count(`SELECT count(*) FROM leads WHERE waiting_for = 'drill-crm'`) == size.leads
	})
	if n := s.count(`SELECT count(*) FROM idempotency_keys WHERE state <> 'processing'`); n != 0 {
		t.Fatalf("%d keys finished during the outage, want none", n)
	}
	if wait := size.outage - time.Since(start); wait > 0 {
		time.Sleep(wait)
	}
	outage := time.Since(start)
	callsDuring := d.calls(v, s) - callsBefore

	// Back, losing its first answers.
	if err := d.down(v, s, false); err != nil {
		t.Fatal(err)
	}
	d.lose(v, s, size.lost)
	writesAtRecovery := d.writes(v, s)
	took := s.waitFinished(client, 5*time.Minute)
	writesAfter := d.writes(v, s) - writesAtRecovery

	rows := s.drillKeys(client)
	byRef, total := d.records(v, s, refs)
	completed := 0
	for _, key := range keys {
		row, ref := rows[key], intake.ExternalRef(client, key)
		if row.state != "completed" {
			t.Errorf("key %s: %s, want completed", key, row.state)
			continue
		}
		completed++
		if ids := byRef[ref]; len(ids) != 1 || ids[0] != row.body.CRMID {
			t.Errorf("key %s: crm_id %q; the CRM holds %v under its reference", key, row.body.CRMID, ids)
		}
	}
	if total != size.leads {
		t.Errorf("the CRM holds %d records for %d keys, want one per key", total, size.leads)
	}
	if lostSpent := min(size.lost, (writesAfter+1)/2); lostSpent != size.lost {
		t.Errorf("%d writes after the recovery spent %d of the %d lost answers", writesAfter, lostSpent, size.lost)
	}
	maxAttempt, withErrors := s.leadJobs()
	t.Logf("%s: %d leads, %s down (%d calls reached it during the outage, PROBE_INTERVAL %s, %d workers); "+
		"then %d lost answers in %d writes; %d completed %s after the recovery; %d records for %d keys; "+
		"lead jobs: highest attempt %d, %d with errors",
		d.name, size.leads, outage.Round(100*time.Millisecond), callsDuring, probe, size.workers,
		size.lost, writesAfter, completed, took.Round(100*time.Millisecond), total, len(keys), maxAttempt, withErrors)
}

// sum adds up a stand-in's request counts.
func sum[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// givenUp counts the channels of client's leads given up, by destination,
// and lists those given up before their third failure.
func (s *stack) givenUp(client string) (map[string]int, []string) {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT idempotency_key, coalesce(channels, '[]') FROM leads WHERE client_id = $1`, client)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	var early []string
	for rows.Next() {
		var key string
		var raw []byte
		var chans []struct {
			Name, State string
			Failures    int
		}
		if err := rows.Scan(&key, &raw); err != nil {
			s.t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &chans); err != nil {
			s.t.Fatal(err)
		}
		for _, c := range chans {
			if c.State != "failed" {
				continue
			}
			out[c.Name]++
			if c.Failures < 2 {
				early = append(early, fmt.Sprintf("key %s: %s after %d failures", key, c.Name, c.Failures))
			}
		}
	}
	return out, early
}

// tally counts how many keys have each count.
func tally(counts map[string]int) map[int]int {
	out := map[int]int{}
	for _, n := range counts {
		out[n]++
	}
	return out
}

// The channels' drill: leads announced at once on a Slack bot (its
// stand-in), by e-mail (a real Mailpit behind its lost-answer proxy) and
// over http (the fake downstream's /notify), while each channel loses
// answers (the message taken, the connection dropped before the answer)
// and, first, Mailpit answers every MAIL FROM with 451 for the outage.
// Every lead completes; the Slack bot's channel shows exactly one message
// per lead (it finds its message after a lost answer) and the http
// receiver one key per lead (the same Idempotency-Key on every delivery);
// e-mail comes at least once, with one distinct Message-ID per lead, a
// repeat only after a lost answer. The webhook mode of Slack, which has no
// look-up, repeats a message after each lost answer: at least once (and a
// lead whose three posts all lost their answers is given up, its message
// shown three times).
func TestChannelDrill(t *testing.T) {
	t.Parallel()
	size := drillSizes(t)
	const probe = time.Second
	env := []string{"JOB_MAX_ATTEMPTS=8", "PROBE_INTERVAL=" + probe.String(), "WORKER_CONCURRENCY=20"}

	t.Run("bot-mail-http", func(t *testing.T) {
		t.Parallel()
		const client, token = "drill-ch", "drill-channels-token-0001"
		mp := mailpittest.Start(t, mailpittest.Options{Auth: true})
		v := startStandins(t, nil, vendors.Slack)
		s := newStack(t, &stackOpts{workerEnv: env})
		ds := []dest{
			{name: "slack-bot", kind: "slack", members: map[string]string{"base_url": v.base(vendors.Slack), "token": slackfake.DefaultToken, "channel": slackfake.DefaultChannel}},
			{name: "sales-mail", kind: "email", members: map[string]string{
				"host": mp.Host, "port": strconv.Itoa(mp.Port), "tls": "none",
				"username": mailpittest.User, "password": mailpittest.Password, "from": "Leads <leads@acme.example>",
			}, lists: map[string][]string{"to": {"sales@acme.example"}}},
			{name: "notify-http", kind: "http", members: map[string]string{"url": s.fakeURL + "/notify"}},
		}
		path := writeClients(t, clientsPath(t), ds, []fileClient{{id: client, token: token, notify: []string{"slack-bot", "sales-mail", "notify-http"}}})
		s.startAPI("CLIENTS_FILE="+path, "JOB_MAX_ATTEMPTS=8")
		for range size.workers {
			s.startWorker("CLIENTS_FILE=" + path)
		}

		if err := mp.Chaos(mailpittest.Sender, 451); err != nil {
			t.Fatal(err)
		}
		v.Slack.Script(slackfake.TargetPost, lostAnswers(size.lost)...)
		s.fake.Script(fake.Notify, lostAnswers(size.lost)...)
		// Mailpit accepts nothing during the outage: its lost answers come
		// after, one answer in two.
		mp.LoseAnswersEvery(size.lost, 1)
		start := time.Now()
		keys := s.submitAll(token, "drill-ch", 0, size.leads)
		if wait := size.outage - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		if err := mp.Chaos(mailpittest.Sender, 0); err != nil {
			t.Fatal(err)
		}
		outage := time.Since(start)
		took := s.waitFinished(client, 10*time.Minute)

		rows := s.drillKeys(client)
		slack, httpKeys, mailIDs := map[string]int{}, map[string]int{}, map[string]int{}
		msgs, err := mp.Messages()
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]int{}
		for _, m := range msgs {
			byID[m.MessageID]++
		}
		st := s.fake.State()
		notified, warnings := 0, map[string]int{}
		httpDeliveries := 0
		for _, key := range keys {
			row, ref := rows[key], intake.ExternalRef(client, key)
			if row.state != "completed" {
				t.Errorf("key %s: %s, want completed", key, row.state)
				continue
			}
			if row.body.Notified {
				notified++
			}
			for _, w := range row.body.Warnings {
				warnings[w]++
			}
			slack[key] = len(v.Slack.Messages(ref))
			n := st.Notifications[ref+":notify"]
			httpKeys[key], httpDeliveries = min(n.Deliveries, 1), httpDeliveries+n.Deliveries
			mailIDs[key] = byID[ref+".notify@acme.example"]
			delete(byID, ref+".notify@acme.example")
		}
		mailDeliveries, distinct := 0, 0
		for _, n := range mailIDs {
			mailDeliveries += n
			if n > 0 {
				distinct++
			}
		}
		lost := mp.Proxy().Lost()
		t.Logf("channels: %d leads, the SMTP server answering 451 for %s; %d completed %s after, %d notified on every channel, warnings %v",
			size.leads, outage.Round(100*time.Millisecond), len(rows), took.Round(100*time.Millisecond), notified, warnings)
		t.Logf("  slack bot: %d lost answers scripted; messages per lead %v (count: leads)", size.lost, tally(slack))
		t.Logf("  http: %d lost answers scripted; %d keys for %d leads, %d deliveries in all", size.lost, len(st.Notifications), size.leads, httpDeliveries)
		t.Logf("  e-mail: %d answers lost; %d deliveries, %d distinct Message-IDs for %d leads; deliveries per lead %v; %d messages of no lead",
			lost, mailDeliveries, distinct, size.leads, tally(mailIDs), len(byID))

		for key, n := range slack {
			if n != 1 {
				t.Errorf("key %s: %d Slack messages, want exactly 1", key, n)
			}
		}
		if len(st.Notifications) != size.leads {
			t.Errorf("the http receiver holds %d keys for %d leads, want one per lead", len(st.Notifications), size.leads)
		}
		shown := 0
		for key, n := range mailIDs {
			if n >= 1 {
				continue
			}
			t.Errorf("key %s: no e-mail", key)
			if shown < 2 {
				// What became of it: the key and the worker's lines of its
				// lead.
				shown++
				r := runBinary(t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + path}, "keys", "show", key, "--client", client)
				var lines []string
				for _, w := range s.workers {
					for _, l := range w.Lines() {
						if strings.Contains(l, rows[key].body.LeadID) {
							lines = append(lines, l)
						}
					}
				}
				t.Logf("key %s:\n%s\nthe worker's lines of its lead:\n%s", key, r.stdout, strings.Join(lines, "\n"))
			}
		}
		if distinct != size.leads || len(byID) != 0 {
			t.Errorf("%d distinct Message-IDs for %d leads, %d of no lead", distinct, size.leads, len(byID))
		}
		if repeats := mailDeliveries - distinct; repeats > lost {
			t.Errorf("%d repeated e-mails for %d lost answers: a repeat without a lost answer", repeats, lost)
		}
		if lost != size.lost {
			t.Errorf("%d answers lost, want %d", lost, size.lost)
		}
		// A lead's channel is given up only after its third failure (each
		// a lost answer or a 451 here).
		givenUp, early := s.givenUp(client)
		t.Logf("  channels given up after three failures: %v", givenUp)
		for _, e := range early {
			t.Errorf("a channel given up early: %s", e)
		}
		if notified+sum(givenUp) < size.leads {
			t.Errorf("%d of %d leads notified on every channel, %d channels given up", notified, size.leads, sum(givenUp))
		}
	})

	t.Run("slack-webhook", func(t *testing.T) {
		t.Parallel()
		const client, token = "drill-hook", "drill-hook-token-0001"
		v := startStandins(t, nil, vendors.Slack)
		s := newStack(t, &stackOpts{workerEnv: env})
		ds := []dest{{name: "slack-hook", kind: "slack", members: map[string]string{"webhook_url": v.base(vendors.Slack) + slackfake.DefaultWebhook}}}
		path := writeClients(t, clientsPath(t), ds, []fileClient{{id: client, token: token, notify: []string{"slack-hook"}}})
		s.startAPI("CLIENTS_FILE="+path, "JOB_MAX_ATTEMPTS=8")
		for range size.workers {
			s.startWorker("CLIENTS_FILE=" + path)
		}
		v.Slack.Script(slackfake.TargetWebhook, lostAnswers(size.lost)...)
		keys := s.submitAll(token, "drill-hook", 0, size.leads)
		took := s.waitFinished(client, 5*time.Minute)
		rows := s.drillKeys(client)
		counts, messages, givenUp := map[string]int{}, 0, 0
		for _, key := range keys {
			row := rows[key]
			counts[key] = len(v.Slack.Messages(intake.ExternalRef(client, key)))
			messages += counts[key]
			switch {
			case row.state != "completed":
				t.Errorf("key %s: %s, want completed", key, row.state)
			case counts[key] < 1:
				t.Errorf("key %s: no message", key)
			case !row.body.Notified:
				// Given up after its third transient failure: each a lost
				// answer, each a message posted.
				givenUp++
				if counts[key] != 3 || len(row.body.Warnings) != 1 || row.body.Warnings[0] != "notification_failed" {
					t.Errorf("key %s: %+v with %d messages, want notified, or given up after three lost answers", key, row.body, counts[key])
				}
			}
		}
		t.Logf("slack webhook: %d leads, %d lost answers scripted, %d webhook calls; %d messages (%d repeats), per lead %v (count: leads); "+
			"%d given up after three lost answers (notification_failed, their message posted three times); done %s after the last submission",
			size.leads, size.lost, v.Slack.State().Requests[slackfake.TargetWebhook], messages, messages-size.leads, tally(counts),
			givenUp, took.Round(100*time.Millisecond))
		if repeats := messages - size.leads; repeats > size.lost {
			t.Errorf("%d repeats for %d lost answers", repeats, size.lost)
		}
	})
}
