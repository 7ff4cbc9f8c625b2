package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/vendors"
)

// badDestinations are clients files each wrong in one way, built on the
// good one of a HubSpot CRM and a Slack bot; named names the destination
// the refusal must name, and each file's secrets are secretBad.
const secretBad = "bad-input-secret-5a5a0f0f"

type badFile struct {
	name  string
	named string
	file  func(good []dest, client fileClient) ([]dest, []fileClient)
}

func badFiles(v *standins) []badFile {
	email := func(host string, to int) dest {
		addrs := make([]string, to)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("sales%d@acme.example", i)
		}
		return dest{name: "sales-mail", kind: "email", members: map[string]string{
			"host": host, "port": "25", "tls": "none", "username": "leads", "password": secretBad, "from": "leads@acme.example",
		}, lists: map[string][]string{"to": addrs}}
	}
	add := func(d dest) func([]dest, fileClient) ([]dest, []fileClient) {
		return func(good []dest, c fileClient) ([]dest, []fileClient) {
			return append(good[:len(good):len(good)], d), []fileClient{c}
		}
	}
	client := func(change func(c *fileClient)) func([]dest, fileClient) ([]dest, []fileClient) {
		return func(good []dest, c fileClient) ([]dest, []fileClient) {
			change(&c)
			return good, []fileClient{c}
		}
	}
	return []badFile{
		{"UnknownKind", `"acme-zoho"`, add(dest{name: "acme-zoho", kind: "zoho", members: map[string]string{"token": secretBad}})},
		{"MissingMember", `"acme-pipedrive"`, add(dest{name: "acme-pipedrive", kind: "pipedrive", members: map[string]string{
			"base_url": v.base(vendors.Pipedrive), "api_token": secretBad}})},
		{"NameTwice", `"acme-hubspot"`, add(dest{name: "acme-hubspot", kind: "hubspot", members: map[string]string{"token": secretBad}})},
		{"MissingDestination", `"acme-missing"`, client(func(c *fileClient) { c.crm = "acme-missing" })},
		{"ChannelAsCRM", `"sales-slack"`, client(func(c *fileClient) { c.crm = "sales-slack" })},
		{"MapUnknownSource", `"acme-map"`, add(dest{name: "acme-map", kind: "hubspot", members: map[string]string{"token": secretBad},
			raw: "    map: {jobtitle: no_such_member}\n"})},
		{"EmailTLSNoneNotLoopback", `"sales-mail"`, add(email("smtp.example.com", 1))},
		{"EmailTwentyOneRecipients", `"sales-mail"`, add(email("127.0.0.1", 21))},
		{"SlackWebhookAndToken", `"sales-slack-both"`, add(dest{name: "sales-slack-both", kind: "slack", members: map[string]string{
			"webhook_url": v.base(vendors.Slack) + "/services/T0BAD/B0BAD/" + secretBad,
			"token":       "xoxb-1-2-" + secretBad, "channel": slackfake.DefaultChannel}})},
	}
}

// noDatabase is a listener standing where the database would be: it counts
// the connections it is offered, and answers none.
func noDatabase(t *testing.T) (url string, connections func() int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return "postgres://postgres@" + l.Addr().String() + "/leadintake?sslmode=disable&connect_timeout=2", n.Load
}

// A clients file wrong in any of the ways the contract names (an unknown
// kind, a missing member, a name used twice, a client naming a missing
// destination or a channel as its crm, a map naming an unknown source,
// e-mail in clear to a host that is not loopback, 21 recipients, a Slack
// destination with a webhook and a token) stops the worker and the api at
// start, with one line on stderr that names the destination and shows no
// secret, before either connects to the database; on SIGHUP each is
// refused with such a line, and the file in force stays: leads still go
// to its destinations.
func TestDestinationsBadInput(t *testing.T) {
	t.Parallel()
	const token = "bad-input-client-token-0001"
	v := startStandins(t, nil, vendors.HubSpot, vendors.Slack, vendors.Pipedrive)
	good := []dest{
		{name: "acme-hubspot", kind: "hubspot", members: map[string]string{"base_url": v.base(vendors.HubSpot), "token": hubspotfake.DefaultToken}},
		{name: "sales-slack", kind: "slack", members: map[string]string{"base_url": v.base(vendors.Slack), "token": slackfake.DefaultToken, "channel": slackfake.DefaultChannel}},
	}
	client := fileClient{id: "bad-input", token: token, crm: "acme-hubspot", notify: []string{"sales-slack"}}
	cases := badFiles(v)

	t.Run("AtStart", func(t *testing.T) {
		t.Parallel()
		for _, bc := range cases {
			t.Run(bc.name, func(t *testing.T) {
				t.Parallel()
				ds, cs := bc.file(good, client)
				path := writeClients(t, clientsPath(t), ds, cs)
				dbURL, connections := noDatabase(t)
				for _, bin := range []string{"worker", "api"} {
					r := runBinary(t, bin, []string{"DATABASE_URL=" + dbURL, piiHashKey, "CLIENTS_FILE=" + path,
						"ENRICHMENT_URL=http://127.0.0.1:1/enrichment", "CRM_URL=http://127.0.0.1:1/crm", "NOTIFY_URL=http://127.0.0.1:1/notify",
						"API_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0"})
					lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
					switch {
					case r.code == 0:
						t.Errorf("%s: exit 0 with a bad file", bin)
					case len(lines) != 1 || !strings.Contains(lines[0], bc.named):
						t.Errorf("%s: stderr %q, want one line naming %s", bin, r.stderr, bc.named)
					case strings.Contains(r.stdout+r.stderr, secretBad):
						t.Errorf("%s: the output shows the file's secret: %s", bin, r.stderr)
					}
					if n := connections(); n != 0 {
						t.Errorf("%s: %d connections to the database before it stopped, want none", bin, n)
					}
					t.Logf("%s: exit %d: %s", bin, r.code, lines[0])
				}
			})
		}
	})

	t.Run("OnSIGHUP", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, nil)
		path := writeClients(t, clientsPath(t), good, []fileClient{client})
		api := s.startAPI("CLIENTS_FILE=" + path)
		worker := s.startWorker("CLIENTS_FILE="+path, "PROBE_INTERVAL=1s")
		delivered := func(i int) {
			t.Helper()
			key := fmt.Sprintf("bad-input-key-%04d", i)
			submitRetrying(t, s, token, key, leadBody(500+i))
			b := s.completed(token, key, time.Minute)
			if c, ok := v.HubSpot.ContactByEmail(fmt.Sprintf("lead%d@example.com", 500+i)); !ok || c.ID != b.CRMID || !b.Notified {
				t.Errorf("key %s: %+v, HubSpot's contact %+v: want it in the file in force's CRM, notified", key, b, c)
			}
			if n := len(v.Slack.Messages(intake.ExternalRef(client.id, key))); n != 1 {
				t.Errorf("key %s: %d Slack messages, want 1", key, n)
			}
		}
		delivered(0)
		for i, bc := range cases {
			ds, cs := bc.file(good, client)
			writeClients(t, path, ds, cs)
			for name, p := range map[string]*system.Process{"worker": worker, "api": api} {
				line := hangup(t, p, "clients file refused")
				if !strings.Contains(line, strings.ReplaceAll(bc.named, `"`, `\"`)) || strings.Contains(line, secretBad) {
					t.Errorf("%s, %s: the refusal %s, want it to name %s and show no secret", bc.name, name, line, bc.named)
				}
			}
			delivered(i + 1)
		}
		if v.Pipedrive.Persons() != 0 {
			t.Errorf("a refused file's destination was called")
		}
		for _, p := range []*system.Process{api, worker} {
			if strings.Contains(p.Output(), secretBad) {
				t.Error("a process's output shows a refused file's secret")
			}
		}
	})
}
