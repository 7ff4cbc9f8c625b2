package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/destination/teams/teamsfake"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/vendors"
)

// `worker destinations check` against the stand-ins, every kind at once:
// each destination that can be checked without sending is ok (HubSpot,
// Salesforce, Pipedrive, a Slack bot, e-mail), the webhooks and the http
// destinations (the environment's two included) are "ok (not checkable
// without sending)", and the check sends nothing; with HubSpot's token
// revoked, that one line says failed (no secret) and the command exits 1;
// --json gives [{name, kind, ok, reason}]; a NAME checks that one, and a
// NAME that does not exist fails. It never connects to the database.
func TestDestinationsCheck(t *testing.T) {
	t.Parallel()
	mp := mailpittest.Start(t, mailpittest.Options{Auth: true})
	v := startStandins(t, &vendors.Options{
		HubSpot:    &hubspotfake.Options{Token: secretHubSpot},
		Salesforce: &salesforcefake.Options{ClientSecret: secretSalesforce},
		Pipedrive:  &pipedrivefake.Options{Token: secretPipedrive},
		Slack:      &slackfake.Options{Token: secretSlackBot, Webhooks: map[string]string{secretSlackHookPath: slackfake.DefaultChannel}},
		Teams:      &teamsfake.Options{Sig: secretTeamsSig},
	})
	const fakeURL = "http://127.0.0.1:1" // never called
	ds, cs := everyKind(v, fakeURL, mp)
	path := writeClients(t, clientsPath(t), ds, cs)
	env := []string{
		// Nothing listens there: a check that connected would fail.
		"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", piiHashKey,
		"ENRICHMENT_URL=" + fakeURL + "/enrichment", "CRM_URL=" + fakeURL + "/crm", "NOTIFY_URL=" + fakeURL + "/notify",
		"CRM_TOKEN=" + secretHTTPCRM, "NOTIFY_TOKEN=" + secretHTTPNotify, "CLIENTS_FILE=" + path,
	}
	check := func(args ...string) ran {
		t.Helper()
		r := runBinary(t, "worker", env, append([]string{"destinations", "check"}, args...)...)
		for _, secret := range []string{secretHubSpot, secretSalesforce, secretPipedrive, secretSlackBot, secretSlackHookPart,
			secretTeamsSig, secretHTTPCRM, secretHTTPNotify, mailpittest.Password} {
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("check %v shows a secret:\n%s%s", args, r.stdout, r.stderr)
			}
		}
		return r
	}
	const webhook = " ok (not checkable without sending)"
	want := []string{
		"crm http" + webhook,
		"notification http" + webhook,
		"acme-hubspot hubspot ok",
		"acme-salesforce salesforce ok",
		"acme-pipedrive pipedrive ok",
		"crm-http http" + webhook,
		"slack-bot slack ok",
		"slack-hook slack" + webhook,
		"sales-teams teams" + webhook,
		"notify-http http" + webhook,
		"sales-mail email ok",
	}
	r := check()
	if got := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n"); r.code != 0 || !slices.Equal(got, want) {
		t.Fatalf("check: exit %d\nstdout:\n%s\nstderr: %s\nwant:\n%s", r.code, r.stdout, r.stderr, strings.Join(want, "\n"))
	}
	// Nothing was sent, written or posted.
	if v.HubSpot.Records() != 0 || v.Salesforce.Count() != 0 || len(v.Pipedrive.Leads()) != 0 ||
		v.Slack.State().Messages != 0 || v.Teams.State().Messages != 0 {
		t.Errorf("a check changed something: HubSpot %d, Salesforce %d, Pipedrive %d, Slack %d, Teams %d",
			v.HubSpot.Records(), v.Salesforce.Count(), len(v.Pipedrive.Leads()), v.Slack.State().Messages, v.Teams.State().Messages)
	}
	if msgs, err := mp.Messages(); err != nil || len(msgs) != 0 {
		t.Errorf("a check sent mail: %d messages (%v)", len(msgs), err)
	}

	// --json: one object per destination, the same verdicts.
	type checked struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	}
	decode := func(r ran) []checked {
		t.Helper()
		var raw []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
			t.Fatalf("--json: %v\n%s", err, r.stdout)
		}
		for _, o := range raw {
			for k := range o {
				if !slices.Contains([]string{"name", "kind", "ok", "reason"}, k) {
					t.Errorf("--json: member %q in %v", k, o)
				}
			}
		}
		var out []checked
		_ = json.Unmarshal([]byte(r.stdout), &out)
		return out
	}
	r = check("--json")
	got := decode(r)
	if r.code != 0 || len(got) != len(want) {
		t.Fatalf("check --json: exit %d, %d entries\n%s", r.code, len(got), r.stdout)
	}
	for i, c := range got {
		line := c.Name + " " + c.Kind + " ok"
		if c.Reason != "" {
			line += " (" + c.Reason + ")"
		}
		if !c.OK || line != want[i] {
			t.Errorf("--json entry %d: %+v, want %q", i, c, want[i])
		}
	}

	// HubSpot's token revoked: that one fails, the command exits 1.
	v.HubSpot.SetRefuseCredentials(true)
	r = check()
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if r.code != 1 || len(lines) != len(want) || !strings.HasPrefix(lines[2], "acme-hubspot hubspot failed: ") {
		t.Fatalf("check with HubSpot's token revoked: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("revoked: %s", lines[2])
	for i, l := range lines {
		if i != 2 && l != want[i] {
			t.Errorf("line %d: %q, want %q", i, l, want[i])
		}
	}
	r = check("--json", "acme-hubspot", "slack-bot")
	if got := decode(r); r.code != 1 || len(got) != 2 || got[0].OK || got[0].Reason == "" || got[0].Kind != "hubspot" || !got[1].OK || got[1].Name != "slack-bot" {
		t.Errorf("check --json acme-hubspot slack-bot: exit %d\n%s", r.code, r.stdout)
	}
	v.HubSpot.SetRefuseCredentials(false)

	// Names: one checked alone; one that does not exist fails.
	if r = check("acme-salesforce"); r.code != 0 || r.stdout != "acme-salesforce salesforce ok\n" {
		t.Errorf("check acme-salesforce: exit %d %q", r.code, r.stdout)
	}
	if r = check("acme-salesforce", "no-such-destination"); r.code != 1 ||
		r.stdout != "acme-salesforce salesforce ok\nno-such-destination - failed: no such destination\n" {
		t.Errorf("check with a name that does not exist: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = check("--json", "no-such-destination")
	if got := decode(r); r.code != 1 || len(got) != 1 || got[0].OK || got[0].Name != "no-such-destination" || got[0].Reason != "no such destination" {
		t.Errorf("check --json no-such-destination: exit %d %s", r.code, r.stdout)
	}
}
