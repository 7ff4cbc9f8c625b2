package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/destination/teams/teamsfake"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/otlpsink"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/internal/vendors"
)

// The secrets of every kind at once, each distinctive, so that a trace of
// one anywhere is found.
const (
	secretHubSpot        = "hs-secret-token-3f9a1c77e2d04b18"
	secretSalesforce     = "sf-client-secret-9d2e4477ab31c0de"
	secretPipedrive      = "pd0secret0token0a1b2c3d4e5f60718293a4b5c"
	secretSlackBot       = "xoxb-9090909090-8080808080808-SlackBotSecretZq7Wm3Kp"
	secretSlackHookPart  = "SlackHookSecretR4nd0m77xyz"
	secretSlackHookPath  = "/services/T0SECRET01/B0SECRET01/" + secretSlackHookPart
	secretTeamsSig       = "teams-sig-secret-55aa77cc99ee0011"
	secretHTTPCRM        = "http-crm-secret-token-6e6e2f2f"
	secretHTTPNotify     = "http-notify-secret-token-7b7b3a3a"
	secretClientsFileBad = "broken-file-secret-token-1d1d9c9c"
)

// everyKind is a clients file with a destination of every kind, each
// with its secret, and the clients that use them.
func everyKind(v *standins, fakeURL string, mp *mailpittest.Server) ([]dest, []fileClient) {
	teamsURL := "https://prod-07.westeurope.logic.azure.com:443/workflows/" + teamsfake.DefaultWorkflow +
		"/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + secretTeamsSig
	ds := []dest{
		{name: "acme-hubspot", kind: "hubspot", members: map[string]string{"base_url": v.base(vendors.HubSpot), "token": secretHubSpot}},
		{name: "acme-salesforce", kind: "salesforce", members: map[string]string{
			"base_url": v.base(vendors.Salesforce), "instance_url": "https://acme.my.salesforce.com",
			"client_id": salesforcefake.DefaultClientID, "client_secret": secretSalesforce,
		}},
		{name: "acme-pipedrive", kind: "pipedrive", members: map[string]string{
			"base_url": v.base(vendors.Pipedrive), "api_token": secretPipedrive, "ref_field": pipedrivefake.DefaultRefField,
		}},
		{name: "crm-http", kind: "http", members: map[string]string{"url": fakeURL + "/crm", "token": secretHTTPCRM, "mode": "upsert"}},
		{name: "slack-bot", kind: "slack", members: map[string]string{"base_url": v.base(vendors.Slack), "token": secretSlackBot, "channel": slackfake.DefaultChannel}},
		{name: "slack-hook", kind: "slack", members: map[string]string{"webhook_url": v.base(vendors.Slack) + secretSlackHookPath}},
		{name: "sales-teams", kind: "teams", members: map[string]string{"base_url": v.base(vendors.Teams), "webhook_url": teamsURL}},
		{name: "notify-http", kind: "http", members: map[string]string{"url": fakeURL + "/notify", "token": secretHTTPNotify}},
	}
	if mp != nil {
		ds = append(ds, dest{name: "sales-mail", kind: "email", members: map[string]string{
			"host": mp.Host, "port": strconv.Itoa(mp.Port), "tls": "none",
			"username": mailpittest.User, "password": mailpittest.Password, "from": "Leads <leads@acme.example>",
		}, lists: map[string][]string{"to": {"sales@acme.example"}}})
	}
	mail := []string{"slack-bot"}
	if mp != nil {
		mail = []string{"slack-bot", "sales-mail"}
	}
	cs := []fileClient{
		{id: "every-hubspot", token: "every-hubspot-token-0001", crm: "acme-hubspot", notify: []string{"slack-bot"}},
		{id: "every-salesforce", token: "every-salesforce-token-0001", crm: "acme-salesforce", notify: []string{"slack-hook", "sales-teams"}},
		{id: "every-pipedrive", token: "every-pipedrive-token-0001", crm: "acme-pipedrive", notify: []string{"notify-http"}},
		{id: "every-http", token: "every-http-token-0001", crm: "crm-http", notify: mail},
	}
	return ds, cs
}

// No secret of any destination appears in anything the system shows:
// every kind configured at once, with distinctive secrets; leads run
// through them while they misbehave (refused credentials, 5xx, lost
// answers, an expired session); then the processes' output, River's jobs
// (arguments and errors), the exported spans, both /metrics, the delivery
// log of every lead (`api keys show --json`), `worker destinations check`
// and its --json, and the error of a clients file refused on SIGHUP are
// searched for each secret, and for the access tokens the Salesforce
// stand-in issued.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	mp := mailpittest.Start(t, mailpittest.Options{Auth: true})
	rcv, err := otlpsink.Start(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Close() })
	v := startStandins(t, &vendors.Options{
		HubSpot:    &hubspotfake.Options{Token: secretHubSpot},
		Salesforce: &salesforcefake.Options{ClientSecret: secretSalesforce},
		Pipedrive:  &pipedrivefake.Options{Token: secretPipedrive},
		Slack:      &slackfake.Options{Token: secretSlackBot, Webhooks: map[string]string{secretSlackHookPath: slackfake.DefaultChannel}},
		Teams:      &teamsfake.Options{Sig: secretTeamsSig},
	})
	s := newStack(t, &stackOpts{fake: &fake.Options{CRMToken: secretHTTPCRM, NotifyToken: secretHTTPNotify}})
	ds, cs := everyKind(v, s.fakeURL, mp)
	path := writeClients(t, clientsPath(t), ds, cs)
	api := s.startAPI(append(traceEnv(rcv), "CLIENTS_FILE="+path)...)
	workerEnv := []string{"CLIENTS_FILE=" + path, "PROBE_INTERVAL=1s", "CRM_TOKEN=" + secretHTTPCRM, "NOTIFY_TOKEN=" + secretHTTPNotify}
	worker := s.startWorker(append(traceEnv(rcv), workerEnv...)...)

	// The misbehaviour, before the leads.
	v.HubSpot.SetRefuseCredentials(true)
	v.Teams.SetRefuseCredentials(true)
	if err := mp.Chaos(mailpittest.Authentication, 535); err != nil {
		t.Fatal(err)
	}
	mp.LoseAnswers(1)
	v.Salesforce.Script(salesforcefake.TargetUpsert, salesforcefake.ServerErrorFault(), standinDrop())
	v.Salesforce.ExpireTokensAfter(2)
	v.Pipedrive.Script(pipedrivefake.TargetLeadsCreate, pipedrivefake.ServerErrorFault(), standinDrop())
	v.Slack.Script(slackfake.TargetPost, standinDrop(), slackfake.RateLimitFault(1))
	v.Slack.Script(slackfake.TargetWebhook, slackfake.WebhookFault(http.StatusInternalServerError, "internal_error"))
	s.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusServiceUnavailable}, fake.Fault{DropAfterApply: true})
	s.fake.Script(fake.Notify, fake.Fault{Status: http.StatusBadGateway})

	const perClient = 3
	var keys []struct{ client, token, key string }
	for i, c := range cs {
		for _, key := range s.submitAll(c.token, "secret-"+c.id, 10*i, perClient) {
			keys = append(keys, struct{ client, token, key string }{c.id, c.token, key})
		}
	}
	// The refused credentials hold their destinations; then they are
	// accepted again.
	testkit.EventuallyWithin(t, time.Minute, "leads held by refused credentials", func() bool {
		for _, d := range []string{"acme-hubspot", "sales-teams", "sales-mail"} {
			if gauge(t, worker, "leadintake_downstream_unauthorized", d) != 1 {
				return false
			}
		}
		return s.count(`SELECT count(DISTINCT waiting_for) FROM leads WHERE waiting_for IN ('acme-hubspot', 'sales-teams', 'sales-mail')`) == 3
	})
	time.Sleep(2 * time.Second)
	v.HubSpot.SetRefuseCredentials(false)
	v.Teams.SetRefuseCredentials(false)
	if err := mp.Chaos(mailpittest.Authentication, 0); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		s.completed(k.token, k.key, 2*time.Minute)
	}

	// A clients file refused on SIGHUP, its secrets in the members at fault.
	broken := clientsYAML(append(ds[:len(ds):len(ds)],
		dest{name: "broken-slack", kind: "slack", members: map[string]string{
			"token": "xoxb-1-2-" + secretClientsFileBad, "webhook_url": v.base(vendors.Slack) + "/services/T1/B1/" + secretClientsFileBad,
		}},
		dest{name: "broken-hubspot", kind: "hubspot", members: map[string]string{"token": secretClientsFileBad + " with spaces"}},
	), cs)
	writeClientsFile(t, path, broken)
	for name, p := range map[string]*system.Process{"worker": worker, "api": api} {
		if line := hangup(t, p, "clients file refused"); !strings.Contains(line, "broken-slack") {
			t.Errorf("%s: the refusal does not name the destination at fault: %s", name, line)
		}
	}
	writeClientsFile(t, path, clientsYAML(ds, cs))

	// Everything the system shows.
	shown := map[string]string{
		"the api's output":    api.Output(),
		"the worker's output": worker.Output(),
	}
	shown["the api's /metrics"] = string(get(t, adminURL(t, api)+"/metrics", basicAuth{}).body)
	shown["the worker's /metrics"] = string(get(t, adminURL(t, worker)+"/metrics", basicAuth{}).body)
	var jobs strings.Builder
	rows, err := s.pool.Query(t.Context(), `SELECT kind, args::text, coalesce(errors::text, ''), coalesce(metadata::text, '') FROM river_job`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var kind, args, errs, meta string
		if err := rows.Scan(&kind, &args, &errs, &meta); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&jobs, "%s %s %s %s\n", kind, args, errs, meta)
	}
	rows.Close()
	shown["River's jobs"] = jobs.String()
	var spans strings.Builder
	testkit.EventuallyWithin(t, 30*time.Second, "spans of the worker's calls", func() bool {
		n := 0
		for _, sp := range rcv.Spans() {
			if sp.Service == "leadintake-worker" {
				n++
			}
		}
		return n > 0
	})
	for _, sp := range rcv.Spans() {
		fmt.Fprintf(&spans, "%s %s %v %v %s\n", sp.Service, sp.Name, sp.Attributes, sp.Resource, prototext.Format(sp.Raw))
	}
	shown["the spans"] = spans.String()
	var delivery strings.Builder
	called := map[string]map[string]int{} // destination -> outcome -> calls
	env := []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + path}
	for _, k := range keys {
		r := runBinary(t, "api", env, "keys", "show", k.key, "--client", k.client, "--json")
		var rep struct {
			Calls []struct{ Destination, Outcome string }
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("keys show %s: exit %d: %s%s", k.key, r.code, r.stdout, r.stderr)
		}
		for _, c := range rep.Calls {
			if called[c.Destination] == nil {
				called[c.Destination] = map[string]int{}
			}
			called[c.Destination][c.Outcome]++
		}
		delivery.WriteString(r.stdout + r.stderr)
	}
	shown["the delivery log"] = delivery.String()
	t.Logf("the delivery log's calls, by destination and outcome: %v", called)
	for _, d := range ds {
		if len(called[d.name]) == 0 {
			t.Errorf("the delivery log names no call to %s", d.name)
		}
	}
	checkEnv := append([]string{"DATABASE_URL=" + s.dbURL, piiHashKey, "ENRICHMENT_URL=" + s.fakeURL + "/enrichment",
		"CRM_URL=" + s.fakeURL + "/crm", "NOTIFY_URL=" + s.fakeURL + "/notify"}, workerEnv...)
	for _, args := range [][]string{{"destinations", "check"}, {"destinations", "check", "--json"}} {
		r := runBinary(t, "worker", checkEnv, args...)
		shown["worker "+strings.Join(args, " ")] = r.stdout + r.stderr
		if r.code != 0 {
			t.Errorf("worker %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	// The same check as a malformed file meets it at start.
	writeClientsFile(t, path, broken)
	r := runBinary(t, "worker", checkEnv, "destinations", "check")
	shown["worker destinations check, a broken file"] = r.stdout + r.stderr
	if r.code == 0 {
		t.Errorf("worker destinations check with a broken file: exit 0")
	}

	secrets := map[string]string{
		"HubSpot's token": secretHubSpot, "Salesforce's client secret": secretSalesforce, "Pipedrive's API token": secretPipedrive,
		"Slack's bot token": secretSlackBot, "Slack's webhook URL": secretSlackHookPart, "Teams' sig": secretTeamsSig,
		"the http CRM's token": secretHTTPCRM, "the http channel's token": secretHTTPNotify, "the SMTP password": mailpittest.Password,
		"the refused file's secret": secretClientsFileBad, "a bearer token": "Bearer ",
	}
	for i, tok := range v.salesforceTokens() {
		secrets[fmt.Sprintf("Salesforce's access token %d", i+1)] = tok
	}
	if len(v.salesforceTokens()) < 2 {
		t.Errorf("the Salesforce stand-in issued %d tokens, want a new one after the expiry", len(v.salesforceTokens()))
	}
	for where, text := range shown {
		if text == "" {
			t.Errorf("%s: nothing to search", where)
		}
		for what, secret := range secrets {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s shows %s: …%s…", where, what, text[max(0, i-80):min(len(text), i+len(secret)+20)])
			}
		}
	}
}

// standinDrop is the lost answer: the request applied, the connection
// dropped.
func standinDrop() fake.Fault { return fake.Fault{DropAfterApply: true} }
