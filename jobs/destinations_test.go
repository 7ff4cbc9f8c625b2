package jobs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
)

// channelStates reads the lead's channels as saved.
func (b *testBundle) channelStates(t *testing.T, sub *submission) []map[string]any {
	t.Helper()
	var raw []byte
	if err := b.pool.QueryRow(context.Background(), `SELECT channels FROM leads WHERE id = $1`, sub.LeadID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Each channel of a lead is sent once: a channel that fails is retried
// alone, never the one that accepted; the lead is notified when both have.
func TestChannelsAreEachSentOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Second: true, Client: "    notify: [notification, second]\n"})
	b.second.Script(fake.Notify, fake.Fault{Status: http.StatusServiceUnavailable}, fake.Fault{DropAfterApply: true})
	sub := b.submit(t, adaBody)
	got := b.waitFinished(t, sub.Key)
	if got.State != lead.KeyCompleted || got.Body["notified"] != true {
		t.Fatalf("%s %s, want completed and notified", got.State, got.Raw)
	}
	if n, _ := b.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
		t.Errorf("the first channel had %d deliveries: repeated for the second's failures", n.Deliveries)
	}
	// The second: a 503, then a lost answer (applied), then a repeat
	// that its Idempotency-Key lets it recognise.
	if n, _ := b.second.Notification(sub.Ref + ":notify"); n.Deliveries != 2 {
		t.Errorf("the second channel had %d deliveries, want 2 (the lost answer and its repeat)", n.Deliveries)
	}
	for _, c := range b.channelStates(t, sub) {
		if c["state"] != "sent" {
			t.Errorf("channel %v", c)
		}
	}
}

// A channel's failure is retried although a later channel of the same
// attempt succeeded: the attempt ends in a retry (the job is not completed
// without a final response), and the next one sends the failed channel
// alone.
func TestChannelRetriedAfterALaterOneSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Second: true, Client: "    notify: [second, notification]\n"})
	b.second.Script(fake.Notify, fake.Fault{Status: http.StatusServiceUnavailable})
	sub := b.submit(t, adaBody)
	got := b.waitFinished(t, sub.Key)
	if got.State != lead.KeyCompleted || got.Body["notified"] != true || len(got.Body["warnings"].([]any)) != 0 {
		t.Fatalf("%s %s, want completed and notified, no warning", got.State, got.Raw)
	}
	if n, _ := b.second.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
		t.Errorf("the failed channel had %d deliveries, want 1", n.Deliveries)
	}
	if n, _ := b.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
		t.Errorf("the channel after it had %d deliveries, want 1", n.Deliveries)
	}
}

// A channel given up does not hold back the others: the lead completes,
// notified false, with one notification_failed.
func TestChannelGivenUpAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Second: true, Client: "    notify: [second, notification]\n"})
	if err := b.second.SetChaos(fake.Notify, fake.Chaos{FailRate: 1, FailStatus: http.StatusUnprocessableEntity}); err != nil {
		t.Fatal(err)
	}
	sub := b.submit(t, adaBody)
	got := b.waitFinished(t, sub.Key)
	if got.State != lead.KeyCompleted || got.Body["notified"] != false || len(got.Body["warnings"].([]any)) != 1 {
		t.Fatalf("%s %s, want completed, not notified, notification_failed", got.State, got.Raw)
	}
	if n, _ := b.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
		t.Errorf("the channel after the one given up had %d deliveries, want 1", n.Deliveries)
	}
}

// A client without channels (notify: []) is not notified, without a
// warning.
func TestNoChannels(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Client: "    notify: []\n"})
	sub := b.submit(t, adaBody)
	got := b.waitFinished(t, sub.Key)
	if got.State != lead.KeyCompleted || got.Body["notified"] != false || len(got.Body["warnings"].([]any)) != 0 {
		t.Fatalf("%s %s, want completed, not notified, no warning", got.State, got.Raw)
	}
	if _, ok := b.fake.Notification(sub.Ref + ":notify"); ok {
		t.Error("notified without a channel")
	}
}

// A client's own CRM destination takes its leads; the environment's gets
// none of them.
func TestClientsOwnCRM(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Second: true, Client: "    crm: second-crm\n"})
	sub := b.submit(t, adaBody)
	if got := b.waitFinished(t, sub.Key); got.State != lead.KeyCompleted {
		t.Fatalf("%s %s", got.State, got.Raw)
	}
	if rec, ok := b.second.CRM(sub.Ref); !ok || rec.Records != 1 {
		t.Errorf("the client's CRM holds %+v", rec)
	}
	if _, ok := b.fake.CRM(sub.Ref); ok {
		t.Error("the environment's CRM got the lead")
	}
}

// Refused credentials are the destination's state, not the lead's: its
// leads wait, spending no attempt, until a call is accepted again; then
// they resume.
func TestRefusedCredentialsHold(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{MaxAttempts: 2, Outages: jobs.Outages{ProbeInterval: time.Second}})
	b.fake.SetRefuseCredentials(true)
	subs := b.submitMany(t, 3)
	testkit.Eventually(t, "the CRM marked unauthorized", func() bool {
		var unauthorized bool
		_ = b.pool.QueryRow(context.Background(), `SELECT unauthorized FROM downstreams WHERE name = 'crm'`).Scan(&unauthorized)
		return unauthorized
	})
	time.Sleep(3 * time.Second) // past the attempts a failure would have spent
	for _, sub := range subs {
		if k, _ := b.key(t, sub.Key); k.State != lead.KeyProcessing {
			t.Fatalf("key %s is %s while the CRM refuses its credentials, want processing", sub.Key, k.State)
		}
	}
	// Corrected (as a SIGHUP would make it): the next probe succeeds.
	b.fake.SetRefuseCredentials(false)
	b.requireDeliveredOnce(t, subs, 2)
	if b.downstreamUp(t, "crm") != true {
		t.Error("the CRM is still down")
	}
}

// The owner chosen reaches the CRM, the notification and the completed
// body.
func TestOwnerReachesTheDestinations(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{Client: "    owners: [{name: alice, crm_owner: \"9001\"}, {name: bob}]\n    assign: [{pool: [alice, bob]}]\n"})
	first, second := b.submit(t, adaBody), b.submit(t, noDataBody)
	for i, sub := range []*submission{first, second} {
		want := []string{"alice", "bob"}[i]
		got := b.waitFinished(t, sub.Key)
		if got.Body["owner"] != want {
			t.Errorf("lead %d: completed body %s, want owner %s", i, got.Raw, want)
		}
		var body struct {
			Owner string `json:"owner"`
		}
		_ = json.Unmarshal(b.crmRecord(t, sub.Ref).LastBody, &body)
		if body.Owner != want {
			t.Errorf("lead %d: CRM owner %q, want %s", i, body.Owner, want)
		}
		n, _ := b.fake.Notification(sub.Ref + ":notify")
		_ = json.Unmarshal(n.FirstBody, &body)
		if body.Owner != want {
			t.Errorf("lead %d: notification owner %q, want %s", i, body.Owner, want)
		}
	}
}
