package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/internal/vendors"
)

// Refused credentials hold a destination, never the lead: a client whose
// CRM is HubSpot and one whose notification goes to a Slack bot, both
// configured with tokens the vendors refuse. Their leads wait (processing,
// no attempt spent: River's jobs show none, and no error), the worker's
// gauge says so for each destination (unauthorized 1, up 0), and the
// vendors see a probe now and then, not a call per lead. The clients file
// corrected and SIGHUP sent, the next probe succeeds and every lead
// completes, with one record (contact, message) each; the gauge is 0
// again.
func TestRefusedCredentialsHold(t *testing.T) {
	t.Parallel()
	const (
		n             = 5
		goodHubSpot   = "hubspot-accepted-token-7c1e"
		badHubSpot    = "hubspot-revoked-token-0b9d"
		goodSlack     = "xoxb-4444444444-5555555555555-AcceptedAcceptedAccepted"
		badSlack      = "xoxb-4444444444-5555555555555-RevokedRevokedRevoked00"
		crmToken      = "held-crm-client-token-0001"
		notifyToken   = "held-notify-client-token-0001"
		probeInterval = time.Second
		holdFor       = 4 * probeInterval
	)
	v := startStandins(t, &vendors.Options{
		HubSpot: &hubspotfake.Options{Token: goodHubSpot},
		Slack:   &slackfake.Options{Token: goodSlack},
	}, vendors.HubSpot, vendors.Slack)
	s := newStack(t, nil)
	destinations := func(hubspotToken, slackToken string) []dest {
		return []dest{
			{name: "acme-hubspot", kind: "hubspot", members: map[string]string{"base_url": v.base(vendors.HubSpot), "token": hubspotToken}},
			{name: "sales-slack", kind: "slack", members: map[string]string{"base_url": v.base(vendors.Slack), "token": slackToken, "channel": slackfake.DefaultChannel}},
		}
	}
	clients := []fileClient{
		{id: "crm-held", token: crmToken, crm: "acme-hubspot", notify: []string{}},
		{id: "notify-held", token: notifyToken, notify: []string{"sales-slack"}},
	}
	path := writeClients(t, clientsPath(t), destinations(badHubSpot, badSlack), clients)
	s.startAPI("CLIENTS_FILE="+path, "JOB_MAX_ATTEMPTS=3")
	worker := s.startWorker("CLIENTS_FILE="+path, "JOB_MAX_ATTEMPTS=3", "PROBE_INTERVAL="+probeInterval.String())

	crmKeys := s.submitAll(crmToken, "held-crm", 0, n)
	notifyKeys := s.submitAll(notifyToken, "held-notify", 100, n)

	// Every lead waits for its destination.
	testkit.EventuallyWithin(t, time.Minute, "every lead waiting for its destination", func() bool {
		return s.count(`SELECT count(*) FROM leads WHERE waiting_for = 'acme-hubspot'`) == n &&
			s.count(`SELECT count(*) FROM leads WHERE waiting_for = 'sales-slack'`) == n
	})
	testkit.EventuallyWithin(t, 30*time.Second, "the gauges of both destinations", func() bool {
		return gauge(t, worker, "leadintake_downstream_unauthorized", "acme-hubspot") == 1 &&
			gauge(t, worker, "leadintake_downstream_unauthorized", "sales-slack") == 1
	})
	for _, d := range []string{"acme-hubspot", "sales-slack"} {
		if up := gauge(t, worker, "leadintake_downstream_up", d); up != 0 {
			t.Errorf("leadintake_downstream_up{downstream=%q} = %v while its credentials are refused, want 0", d, up)
		}
	}
	if u := gauge(t, worker, "leadintake_downstream_unauthorized", "crm"); u != 0 {
		t.Errorf("leadintake_downstream_unauthorized{downstream=\"crm\"} = %v, want 0: the environment's CRM accepts", u)
	}
	hubspotBefore, slackBefore := v.HubSpot.State().Requests[hubspotfake.TargetUpsert], v.Slack.State().Requests[slackfake.TargetPost]
	time.Sleep(holdFor)
	// Held, not failed: nothing finished, no attempt spent, no error.
	if got := s.count(`SELECT count(*) FROM idempotency_keys WHERE state <> 'processing'`); got != 0 {
		t.Errorf("%d keys finished while their destinations refused the credentials, want none", got)
	}
	if maxAttempt, withErrors := s.leadJobs(); maxAttempt > 1 || withErrors > 0 {
		t.Errorf("lead jobs: highest attempt %d, %d with errors; want at most the attempt running and no error (a hold spends none)", maxAttempt, withErrors)
	}
	hubspotCalls := v.HubSpot.State().Requests[hubspotfake.TargetUpsert] - hubspotBefore
	slackCalls := v.Slack.State().Requests[slackfake.TargetPost] - slackBefore
	t.Logf("during %s of refused credentials: %d HubSpot upserts, %d Slack posts (PROBE_INTERVAL %s)", holdFor, hubspotCalls, slackCalls, probeInterval)
	if limit := int(holdFor/probeInterval) + 2; hubspotCalls > limit || slackCalls > limit {
		t.Errorf("%d HubSpot upserts and %d Slack posts while held, want at most %d (the probes)", hubspotCalls, slackCalls, limit)
	}

	// Corrected: the probe succeeds, every lead completes, once.
	writeClients(t, path, destinations(goodHubSpot, goodSlack), clients)
	hangup(t, worker, "clients file read again")
	for i, key := range crmKeys {
		b := s.completed(crmToken, key, time.Minute)
		c, ok := v.HubSpot.ContactByEmail(fmt.Sprintf("lead%d@example.com", i))
		if !ok || c.ID != b.CRMID {
			t.Errorf("key %s: crm_id %q, the stand-in's contact %+v", key, b.CRMID, c)
		}
	}
	if got := v.HubSpot.Records(); got != n {
		t.Errorf("HubSpot holds %d contacts, want %d (one per lead)", got, n)
	}
	for _, key := range notifyKeys {
		if b := s.completed(notifyToken, key, time.Minute); !b.Notified {
			t.Errorf("key %s: not notified", key)
		}
		if msgs := v.Slack.Messages(intake.ExternalRef("notify-held", key)); len(msgs) != 1 {
			t.Errorf("key %s: %d Slack messages, want 1", key, len(msgs))
		}
	}
	testkit.EventuallyWithin(t, 30*time.Second, "the gauges back to 0", func() bool {
		return gauge(t, worker, "leadintake_downstream_unauthorized", "acme-hubspot") == 0 &&
			gauge(t, worker, "leadintake_downstream_unauthorized", "sales-slack") == 0 &&
			gauge(t, worker, "leadintake_downstream_up", "acme-hubspot") == 1 &&
			gauge(t, worker, "leadintake_downstream_up", "sales-slack") == 1
	})
	if maxAttempt, withErrors := s.leadJobs(); maxAttempt > 1 || withErrors > 0 {
		t.Errorf("lead jobs at the end: highest attempt %d, %d with errors; want 1 and none", maxAttempt, withErrors)
	}
	for _, secret := range []string{badHubSpot, goodHubSpot, badSlack, goodSlack} {
		if strings.Contains(worker.Output(), secret) {
			t.Errorf("the worker's output shows a token")
		}
	}
}

// A channel's transient failure is retried even when a later channel of
// the same attempt succeeds: a lead notified on a Slack bot, then over
// http, whose Slack post fails once (a 503) must end notified on both, the
// Slack message posted once, with no notification_failed.
func TestChannelRetriedAfterAnotherChannelSucceeds(t *testing.T) {
	t.Parallel()
	const client, token = "retry-channel", "retry-channel-token-0001"
	v := startStandins(t, nil, vendors.Slack)
	s := newStack(t, nil)
	ds := []dest{
		{name: "slack-bot", kind: "slack", members: map[string]string{"base_url": v.base(vendors.Slack), "token": slackfake.DefaultToken, "channel": slackfake.DefaultChannel}},
		{name: "notify-http", kind: "http", members: map[string]string{"url": s.fakeURL + "/notify"}},
	}
	path := writeClients(t, clientsPath(t), ds, []fileClient{{id: client, token: token, notify: []string{"slack-bot", "notify-http"}}})
	s.startAPI("CLIENTS_FILE=" + path)
	s.startWorker("CLIENTS_FILE=" + path)
	v.Slack.Script(slackfake.TargetPost, standin.Fault{Status: http.StatusServiceUnavailable})
	const key = "retry-channel-0001"
	submitRetrying(t, s, token, key, leadBody(1))
	b := s.completed(token, key, time.Minute)
	if !b.Notified || len(b.Warnings) != 0 {
		r := runBinary(t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + path}, "keys", "show", key, "--client", client)
		t.Errorf("completed %+v, want notified without warnings; the key:\n%s", b, r.stdout)
	}
	if n := len(v.Slack.Messages(intake.ExternalRef(client, key))); n != 1 {
		t.Errorf("%d Slack messages, want 1", n)
	}
}
