package main

// The destinations phase: the vendors' stand-ins and Mailpit beside the
// fake downstream, how they misbehave, and what must hold of them after.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/internal/vendors"
	"github.com/leadintake/leadintake/lead"
)

// The destinations of the phase, by name.
const (
	destHubSpot    = "soak-hubspot"
	destSalesforce = "soak-salesforce"
	destPipedrive  = "soak-pipedrive"
	destSlack      = "soak-slack"
	destMail       = "soak-mail"
	// destHTTP is the environment's notification service (NOTIFY_URL):
	// the fake downstream's, deduplicating by the Idempotency-Key.
	destHTTP   = "notification"
	mailDomain = "soak.example"
)

// vendorOf is each tenant's CRM vendor.
var vendorOf = map[string]string{"soak-a": vendors.HubSpot, "soak-b": vendors.Salesforce, "soak-c": vendors.Pipedrive}

// crmDestination is each vendor's destination.
var crmDestination = map[string]string{vendors.HubSpot: destHubSpot, vendors.Salesforce: destSalesforce, vendors.Pipedrive: destPipedrive}

// soakDestinations is what the clients file says of the destinations.
type soakDestinations struct {
	yaml   string            // the destinations: section
	crm    map[string]string // tenant -> its CRM destination
	notify []string          // every tenant's channels
}

// startVendors serves the stand-ins on a listener of their own and starts
// Mailpit (with authentication, in clear on 127.0.0.1, behind its
// lost-answer proxy); without Mailpit the phase goes on without e-mail,
// saying so.
func (s *stack) startVendors(dir string, out *printer) (*soakDestinations, error) {
	set, err := vendors.New([]string{vendors.HubSpot, vendors.Salesforce, vendors.Pipedrive, vendors.Slack}, nil)
	if err != nil {
		return nil, err
	}
	s.vendors = set
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.vendorSrv = &http.Server{Handler: set.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.vendorSrv.Serve(ln) }()
	origin := "http://" + ln.Addr().String()

	d := &soakDestinations{crm: map[string]string{}, notify: []string{destSlack}}
	if bin, err := mailpittest.Binary(); err != nil {
		out.f("  (no Mailpit, so no e-mail in this phase: %v; scripts/mailpit.sh installs it)", err)
	} else {
		mdir := filepath.Join(dir, "mailpit")
		if err := os.Mkdir(mdir, 0o700); err != nil {
			return nil, err
		}
		// A port found free may be taken before Mailpit binds it.
		for range 3 {
			if s.mail, err = mailpittest.Launch(bin, mailpittest.Options{Auth: true}, mdir); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("mailpit: %w", err)
		}
		d.notify = append(d.notify, destMail)
	}
	d.notify = append(d.notify, destHTTP)

	var b strings.Builder
	b.WriteString("destinations:\n")
	entry := func(name, kind string, members map[string]string, extra string) {
		fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n", name, kind)
		keys := make([]string, 0, len(members))
		for k := range members {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, _ := json.Marshal(members[k])
			fmt.Fprintf(&b, "    %s: %s\n", k, v)
		}
		b.WriteString(extra)
	}
	names := map[string]string{vendors.HubSpot: destHubSpot, vendors.Salesforce: destSalesforce, vendors.Pipedrive: destPipedrive, vendors.Slack: destSlack}
	for _, def := range vendors.Defaults(origin) {
		if name, ok := names[def.Name]; ok {
			entry(name, def.Kind, def.Members, "")
		}
	}
	if s.mail != nil {
		entry(destMail, "email", map[string]string{
			"host": s.mail.Host, "port": strconv.Itoa(s.mail.Port), "tls": "none",
			"username": mailpittest.User, "password": mailpittest.Password, "from": "Soak <leads@" + mailDomain + ">",
		}, "    to: [\"sales@"+mailDomain+"\"]\n")
	}
	d.yaml = b.String()
	for tenant, vendor := range vendorOf {
		d.crm[tenant] = crmDestination[vendor]
	}
	return d, nil
}

// vendorStats counts what the vendors' chaos did.
type vendorStats struct {
	rounds      int
	revocations []string       // "hubspot 4s", in order
	rateLimited map[string]int // rate limits met (429s, Salesforce's 403), by vendor
	mailPauses  int            // Mailpit answering 451 for a while
	mailArmed   int            // answers to a final dot set to be lost
}

// vendorStatuses are the failures the vendors answer with: transient all,
// so that a refusal for good does not end the leads (the classic phases
// cover those).
var vendorStatuses = []int{500, 502, 503, 503, 504}

const (
	revokeFor    = 4 * time.Second
	mailPauseFor = 5 * time.Second
	vendorRound  = 10 * time.Second
)

// breakVendors gives each vendor's every target a random mix of 5xx,
// hangs and lost answers, changed every round until ctx is done, and in
// turn: its rate limit (429s with the vendor's own headers, Salesforce's
// 403 REQUEST_LIMIT_EXCEEDED), a token revoked for a few seconds then
// restored (the SMTP password's refusal too), Mailpit answering 451 for a
// while; it arms lost answers to e-mails' final dots. Then it turns
// everything off.
func (p *phase) breakVendors(ctx context.Context, s *stack, rng *rand.Rand) {
	v := s.vendors
	kits := []struct {
		name    string
		targets []string
		set     func(target string, c standin.Chaos) error
	}{
		{vendors.HubSpot, hubspotfake.Targets, v.HubSpot.Kit().SetChaos},
		{vendors.Salesforce, salesforcefake.Targets(), v.Salesforce.SetChaos},
		{vendors.Pipedrive, pipedrivefake.Targets(), v.Pipedrive.SetChaos},
		{vendors.Slack, slackfake.Targets, v.Slack.Kit().SetChaos},
	}
	refuse := map[string]func(bool){
		vendors.HubSpot: v.HubSpot.SetRefuseCredentials,
		vendors.Salesforce: func(on bool) {
			v.Salesforce.SetRefuseCredentials(on)
			if on {
				// Its sessions end too: the next call asks for a token.
				v.Salesforce.ExpireTokens()
			}
		},
		vendors.Pipedrive: v.Pipedrive.SetRefuseCredentials,
		vendors.Slack:     v.Slack.SetRefuseCredentials,
	}
	revokeOrder := []string{vendors.HubSpot, vendors.Salesforce, vendors.Pipedrive, vendors.Slack}
	if s.mail != nil {
		refuse["smtp"] = func(on bool) {
			code := 0
			if on {
				code = 535
			}
			_ = s.mail.Chaos(mailpittest.Authentication, code)
		}
		revokeOrder = append(revokeOrder, "smtp")
	}
	defer func() {
		for _, k := range kits {
			for _, t := range k.targets {
				_ = k.set(t, standin.Chaos{})
			}
		}
		for _, f := range refuse {
			f(false)
		}
		if s.mail != nil {
			_ = s.mail.Chaos(mailpittest.Sender, 0)
		}
	}()
	for round := 0; ; round++ {
		start := time.Now()
		for _, k := range kits {
			for _, t := range k.targets {
				c := standin.Chaos{FailRate: 0.05, FailStatus: vendorStatuses[rng.IntN(len(vendorStatuses))],
					HangRate: 0.01, DropRate: 0.06, DelayMax: 20 * time.Millisecond, Seed: rng.Uint64()}
				if c.FailStatus == 503 && rng.IntN(3) == 0 {
					c.RetryAfter = "1"
				}
				if err := k.set(t, c); err != nil {
					panic(err) // the rates above are valid
				}
			}
		}
		// The vendor's rate limit, as it answers it. Each holds every
		// lead's calls to the destination, for as long as the answer says:
		// HubSpot's interval (10 s), and, Salesforce sending no
		// Retry-After, a minute (salesforce.LimitHold), once a phase. A
		// scripted fault waits for a call: one left over would meet the
		// drain's.
		limited := revokeOrder[round%4]
		switch limited {
		case vendors.HubSpot:
			v.HubSpot.Script(hubspotfake.TargetUpsert, hubspotfake.RateLimitFault())
		case vendors.Salesforce:
			if round >= 4 {
				limited = ""
				break
			}
			v.Salesforce.Script(salesforcefake.TargetUpsert, salesforcefake.RequestLimitFault())
		case vendors.Pipedrive:
			v.Pipedrive.Script(pipedrivefake.TargetPersonsSearch, pipedrivefake.RateLimitFault(1), pipedrivefake.RateLimitFault(2))
		case vendors.Slack:
			v.Slack.Script(slackfake.TargetPost, slackfake.RateLimitFault(1), slackfake.RateLimitFault(1))
		}
		if s.mail != nil {
			s.mail.LoseAnswers(2)
		}
		p.stats.mu.Lock()
		st := &p.stats.vendors
		st.rounds++
		if st.rateLimited == nil {
			st.rateLimited = map[string]int{}
		}
		if limited != "" {
			st.rateLimited[limited]++
		}
		if s.mail != nil {
			st.mailArmed += 2
		}
		p.stats.mu.Unlock()

		// Every other round a token revoked, then restored; every fourth,
		// Mailpit's 451s.
		if round%2 == 1 {
			who := revokeOrder[(round/2)%len(revokeOrder)]
			p.out.f("  chaos: %s's credentials refused for %s", who, revokeFor)
			refuse[who](true)
			sleep(ctx, revokeFor)
			refuse[who](false)
			p.stats.mu.Lock()
			p.stats.vendors.revocations = append(p.stats.vendors.revocations, who)
			p.stats.mu.Unlock()
		} else if round%4 == 2 && s.mail != nil {
			p.out.f("  chaos: the SMTP server answers 451 for %s", mailPauseFor)
			_ = s.mail.Chaos(mailpittest.Sender, 451)
			sleep(ctx, mailPauseFor)
			_ = s.mail.Chaos(mailpittest.Sender, 0)
			p.stats.mu.Lock()
			p.stats.vendors.mailPauses++
			p.stats.mu.Unlock()
		}
		if !sleep(ctx, time.Until(start.Add(vendorRound))) {
			return
		}
	}
}

// leadChannels is a lead's channels as saved, with what the checks need.
type leadChannels struct {
	id       uuid.UUID
	erased   bool
	channels []struct {
		Name     string            `json:"name"`
		State    lead.ChannelState `json:"state"`
		Failures int               `json:"failures"`
	}
}

// vendorCounts are what the vendors' checks counted, for the report.
type vendorCounts struct {
	records                                map[string]int // by vendor
	slackMessages                          int
	mailDeliveries, mailDistinct, mailLost int
	httpKeys, httpDeliveries               int
	givenUp                                map[string]int // channels given up, by destination
	sent                                   map[string]int // channels that accepted, by destination
}

// checkVendors checks the destinations phase's vendors and channels
// against the keys: one record per chain in each vendor, the one its
// completed leads name; on the Slack bot one message per chain, and one
// for every chain a lead of which saw the channel accept; at the http
// receiver a key for every lead version the channel accepted; by e-mail a
// delivery of every such lead version's Message-ID and none of another;
// and no channel given up early.
func (c *checker) checkVendors(ctx context.Context, subs []*submission) {
	p, v := c.p, c.s.vendors
	c.vendor = vendorCounts{records: map[string]int{}, givenUp: map[string]int{}, sent: map[string]int{}}

	// The leads' channels, by client/key.
	rows, err := c.s.pool.Query(ctx, `SELECT client_id, idempotency_key, id, erased_at IS NOT NULL, coalesce(channels, '[]') FROM leads`)
	if err != nil {
		p.violate(invExactlyOnce, "read the leads' channels: %v", err)
		return
	}
	channels := map[string]*leadChannels{}
	for rows.Next() {
		var client, key string
		var raw []byte
		lc := &leadChannels{}
		if err := rows.Scan(&client, &key, &lc.id, &lc.erased, &raw); err != nil {
			rows.Close()
			p.violate(invExactlyOnce, "read the leads' channels: %v", err)
			return
		}
		if err := json.Unmarshal(raw, &lc.channels); err != nil {
			p.violate(invExactlyOnce, "%s/%s: channels %s", client, key, raw)
		}
		channels[client+"/"+key] = lc
	}
	rows.Close()
	stateOn := func(sub *submission, dest string) lead.ChannelState {
		if lc := channels[sub.id()]; lc != nil {
			for _, ch := range lc.channels {
				if ch.Name == dest {
					return ch.State
				}
			}
		}
		return lead.ChannelPending
	}
	sentOn := func(sub *submission, dest string) bool { return stateOn(sub, dest) == lead.ChannelSent }

	// Chains, and the submissions stored (a key the api refused, or never
	// answered, has no lead).
	chains := map[string][]*submission{} // chain ref -> its submissions
	for _, sub := range subs {
		if c.rows[sub.id()] != nil {
			chains[chainRef(sub)] = append(chains[chainRef(sub)], sub)
		}
	}

	// The CRMs: the records under each chain's reference.
	pipedriveByRef := map[string][]string{}
	for _, l := range v.Pipedrive.Leads() {
		var ref string
		if json.Unmarshal(l.Custom[pipedrivefake.DefaultRefField], &ref) == nil {
			pipedriveByRef[ref] = append(pipedriveByRef[ref], l.ID)
		}
	}
	c.vendorRecords = func(sub *submission) []string {
		root := sub.chainRoot()
		switch vendorOf[root.client] {
		case vendors.HubSpot:
			// A contact per email; a chain keeps its email.
			if ct, ok := v.HubSpot.ContactByEmail(root.lead.email()); ok {
				return []string{ct.ID}
			}
			return nil
		case vendors.Salesforce:
			return v.Salesforce.IDs(chainRef(sub))
		default:
			return pipedriveByRef[chainRef(sub)]
		}
	}
	seen := map[string]int{} // vendor -> records found under the chains
	for ref, chain := range chains {
		inv := invOneCRM
		if len(chain) > 1 || chain[0].depth > 0 {
			inv = invAmendCRM
		}
		ids := c.vendorRecords(chain[0])
		seen[vendorOf[chain[0].chainRoot().client]] += len(ids)
		if len(ids) > 1 {
			p.violate(inv, "%s (%s): %d records under its reference %v", chain[0].chainRoot().id(), vendorOf[chain[0].chainRoot().client], len(ids), ids)
		}
		for _, sub := range chain {
			row := c.rows[sub.id()]
			if row.state != lead.KeyCompleted {
				continue
			}
			if b := completedBody(row.body); len(ids) == 0 || ids[0] != b.CRMID {
				p.violate(inv, "%s: completed with crm_id %q; %s holds %v under %s", sub.id(), b.CRMID, vendorOf[sub.chainRoot().client], ids, ref)
			}
		}
	}
	c.vendor.records[vendors.HubSpot] = v.HubSpot.Records()
	c.vendor.records[vendors.Salesforce] = v.Salesforce.Count()
	c.vendor.records[vendors.Pipedrive] = len(v.Pipedrive.Leads())
	for vendor, n := range c.vendor.records {
		if n != seen[vendor] {
			p.violate(invOneCRM, "%s holds %d records, %d of them under the keys' references", vendor, n, seen[vendor])
		}
	}

	// The Slack bot: one message per chain, which each amendment updates;
	// one more only after a lead of the chain gave the channel up (its
	// post may have been taken, its answer lost, and the next lead of the
	// chain knows of no message to update).
	slackByRef := map[string]int{}
	for _, m := range v.Slack.Messages("") {
		slackByRef[m.Ref]++
		c.vendor.slackMessages++
	}
	for ref, n := range slackByRef {
		if _, ok := chains[ref]; !ok {
			p.violate(invExactlyOnce, "%d Slack messages for %q, which is no key's", n, ref)
		}
	}
	for ref, chain := range chains {
		n, limit, accepted := slackByRef[ref], 1, false
		for _, sub := range chain {
			switch stateOn(sub, destSlack) {
			case lead.ChannelFailed:
				limit++
			case lead.ChannelSent:
				accepted = true
			}
		}
		switch {
		case n > min(limit, len(chain)):
			p.violate(invExactlyOnce, "%s: %d Slack messages for a chain of %d leads", chain[0].chainRoot().id(), n, len(chain))
		case accepted && n == 0:
			p.violate(invExactlyOnce, "%s: the Slack bot accepted, and its chain has no message", chain[0].chainRoot().id())
		}
	}

	// http: a key for every lead version it accepted.
	st := c.s.fake.State()
	for _, sub := range subs {
		if c.rows[sub.id()] == nil {
			continue
		}
		n, ok := st.Notifications[notifyKey(sub)]
		if ok {
			c.vendor.httpKeys++
			c.vendor.httpDeliveries += n.Deliveries
		}
		if sentOn(sub, destHTTP) && !ok {
			p.violate(invExactlyOnce, "%s: the http channel accepted, and its receiver has nothing under %s", sub.id(), notifyKey(sub))
		}
	}

	// E-mail: every accepted lead version's Message-ID delivered, none of
	// another.
	if c.s.mail != nil {
		msgs, err := c.s.mail.Messages()
		if err != nil {
			p.violate(invEmail, "read Mailpit's messages: %v", err)
		}
		byID := map[string]int{}
		for _, m := range msgs {
			byID[m.MessageID]++
		}
		c.vendor.mailDeliveries, c.vendor.mailDistinct, c.vendor.mailLost = len(msgs), len(byID), c.s.mail.Proxy().Lost()
		expected := map[string]bool{}
		for _, sub := range subs {
			if c.rows[sub.id()] == nil {
				continue
			}
			id := messageID(sub)
			expected[id] = true
			if sentOn(sub, destMail) && byID[id] == 0 {
				p.violate(invEmail, "%s: the e-mail channel accepted, and Mailpit has no message %s", sub.id(), id)
			}
		}
		for id, n := range byID {
			if !expected[id] {
				p.violate(invEmail, "%d messages with Message-ID %s, which is no lead's", n, id)
			}
		}
	}

	// No channel given up early.
	for _, sub := range subs {
		lc := channels[sub.id()]
		if lc == nil {
			continue
		}
		for _, ch := range lc.channels {
			switch ch.State {
			case lead.ChannelSent:
				c.vendor.sent[ch.Name]++
			case lead.ChannelFailed:
				c.vendor.givenUp[ch.Name]++
				c.checkGivenUp(ctx, sub, lc, ch.Name, ch.Failures)
			}
		}
	}
}

// messageID is the Message-ID of a lead version's e-mail, without its
// angle brackets.
func messageID(sub *submission) string {
	id := chainRef(sub) + ".notify"
	if sub.depth > 0 {
		id += "." + strconv.Itoa(sub.depth)
	}
	return id + "@" + mailDomain
}

// optionalStepFailures is how many failures a channel takes before it is
// given up (the third transient failure gives it up).
const optionalStepFailures = 2

// checkGivenUp checks a channel given up: after its failures, or after a
// refusal (a 4xx other than 401, 403, 408 and 429 over HTTP; a 5xx other
// than an authentication's over SMTP), or on the lead's last attempt, or
// for an erased lead; otherwise it was given up early.
func (c *checker) checkGivenUp(ctx context.Context, sub *submission, lc *leadChannels, dest string, failures int) {
	if failures >= optionalStepFailures || lc.erased {
		return
	}
	rows, err := c.s.pool.Query(ctx, `SELECT coalesce(kind, ''), step, attempt, outcome FROM lead_calls WHERE lead_id = $1 AND (destination = $2 OR step NOT LIKE 'notification%') ORDER BY id`, lc.id, dest)
	if err != nil {
		c.p.violate(invGivenUp, "%s: read its calls: %v", sub.id(), err)
		return
	}
	defer rows.Close()
	var outcomes []string
	lastAttempt := 0
	for rows.Next() {
		var kind, step, outcome string
		var attempt int
		if err := rows.Scan(&kind, &step, &attempt, &outcome); err != nil {
			c.p.violate(invGivenUp, "%s: read its calls: %v", sub.id(), err)
			return
		}
		lastAttempt = max(lastAttempt, attempt)
		if !strings.HasPrefix(step, "notification") {
			continue
		}
		outcomes = append(outcomes, outcome)
		if refusal(kind, outcome) {
			return
		}
	}
	if lastAttempt >= c.p.attempts {
		return
	}
	c.p.violate(invGivenUp, "%s: %s given up after %d failures on attempt %d of %d (its calls: %s)",
		sub.id(), dest, failures, lastAttempt, c.p.attempts, strings.Join(outcomes, " "))
}

// refusal reports whether a call's outcome refused the message for good.
func refusal(kind, outcome string) bool {
	code, err := strconv.Atoi(outcome)
	if err != nil {
		return false
	}
	if kind == "email" {
		return code >= 500 && !slices.Contains([]int{530, 534, 535, 538}, code)
	}
	return code >= 400 && code < 500 && !slices.Contains([]int{401, 403, 408, 429}, code)
}

// vendorLines are the report's lines on the destinations phase.
func (c *checker) vendorLines() []string {
	if !c.p.vendors {
		return nil
	}
	c.p.stats.mu.Lock()
	st := c.p.stats.vendors
	c.p.stats.mu.Unlock()
	vc := c.vendor
	lines := []string{
		fmt.Sprintf("vendor chaos         %d rounds of 5xx, hangs and lost answers on every target; rate limits met %s; credentials refused in turn: %s; the SMTP server's 451s %d times",
			st.rounds, formatStrCounts(st.rateLimited), strings.Join(st.revocations, ", "), st.mailPauses),
		fmt.Sprintf("vendor records       HubSpot %d contacts, Salesforce %d Leads, Pipedrive %d leads", vc.records[vendors.HubSpot], vc.records[vendors.Salesforce], vc.records[vendors.Pipedrive]),
		fmt.Sprintf("slack bot            %d messages", vc.slackMessages),
		fmt.Sprintf("http channel         %d keys, %d deliveries", vc.httpKeys, vc.httpDeliveries),
	}
	if c.s.mail != nil {
		lines = append(lines, fmt.Sprintf("e-mail               %d deliveries, %d distinct Message-IDs (%d repeats); %d of %d answers to a final dot lost",
			vc.mailDeliveries, vc.mailDistinct, vc.mailDeliveries-vc.mailDistinct, vc.mailLost, st.mailArmed))
	} else {
		lines = append(lines, "e-mail               none (no Mailpit)")
	}
	lines = append(lines, fmt.Sprintf("channels             accepted %s; given up %s", formatStrCounts(vc.sent), formatStrCounts(vc.givenUp)))
	return lines
}
