package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/kinds"
	"github.com/leadintake/leadintake/internal/vendors"
)

// checkOne builds the destination d (a stand-in's defaults, as a clients
// file names them) and makes its kind's check: one authenticated call that
// changes nothing.
func checkOne(t *testing.T, d vendors.Default) error {
	t.Helper()
	spec, ok := kinds.Lookup(d.Kind)
	if !ok {
		t.Fatalf("no kind %q", d.Kind)
	}
	c := &destination.Config{Name: d.Name, Kind: d.Kind, Values: map[string]string{}, Lists: map[string][]string{}, Timeout: 10 * time.Second}
	for k, v := range d.Members {
		if k == "base_url" {
			c.BaseURL = v
			continue
		}
		c.Values[k] = v
	}
	if err := spec.Validate(c); err != nil {
		t.Fatalf("%s: the stand-in's defaults are not a valid destination: %v", d.Name, err)
	}
	var built any
	var err error
	if spec.NewCRM != nil {
		built, err = spec.NewCRM(c)
	} else {
		built, err = spec.NewChannel(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	checker, ok := built.(destination.Checker)
	if !ok {
		t.Fatalf("%s: kind %s cannot check", d.Name, d.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return checker.Check(ctx)
}

// standinDefault returns the defaults of the stand-in name at base.
func standinDefault(t *testing.T, base, name string) vendors.Default {
	t.Helper()
	for _, d := range vendors.Defaults(base) {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no defaults for %s", name)
	return vendors.Default{}
}

// standinState GETs the control API's state of the stand-in name.
func standinState(t *testing.T, base, name string) map[string]any {
	t.Helper()
	resp := mustSend(t, http.MethodGet, base+"/"+name+"/_standin/state", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s state: %d", name, resp.StatusCode)
	}
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Each vendor's stand-in is served under its prefix with its defaults: the
// kind's own check (or, for a webhook, a post) reaches it through the
// base_url (or the URL) a clients file would name, its control API answers
// under the prefix and sees the call, and the fake downstream's own routes
// are untouched beside them.
func TestStandins(t *testing.T) {
	t.Parallel()
	base, logs, stop := start(t)
	t.Cleanup(func() { _ = stop() })

	for _, name := range []string{vendors.HubSpot, vendors.Salesforce, vendors.Pipedrive, vendors.Slack} {
		t.Run(name, func(t *testing.T) {
			if err := checkOne(t, standinDefault(t, base, name)); err != nil {
				t.Fatalf("the %s kind's check against /%s: %v", name, name, err)
			}
			st := standinState(t, base, name)
			requests, _ := st["requests"].(map[string]any)
			if len(requests) == 0 {
				t.Errorf("the stand-in's state shows no request: %v", st)
			}
			// Refused credentials through the control API: the check fails,
			// then passes again.
			if resp := mustSend(t, http.MethodPost, base+"/"+name+"/_standin/credentials", `{"refuse":true}`); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("credentials: %d", resp.StatusCode)
			}
			if err := checkOne(t, standinDefault(t, base, name)); err == nil || destination.Classify(err) != destination.Unauthorized {
				t.Errorf("check with refused credentials: %v, want unauthorized", err)
			}
			mustSend(t, http.MethodPost, base+"/"+name+"/_standin/credentials", `{"refuse":false}`)
			if err := checkOne(t, standinDefault(t, base, name)); err != nil {
				t.Errorf("check after the credentials are accepted again: %v", err)
			}
		})
	}

	t.Run("slack-webhook", func(t *testing.T) {
		url := standinDefault(t, base, "slack-webhook").Members["webhook_url"]
		resp := mustSend(t, http.MethodPost, url, `{"text":"a lead"}`, "Content-Type", "application/json")
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Fatalf("the webhook: %d %q, want 200 ok", resp.StatusCode, b)
		}
		if st := standinState(t, base, vendors.Slack); st["messages"] != float64(1) {
			t.Errorf("the stand-in's state after the webhook's post: %v", st)
		}
	})

	t.Run("teams", func(t *testing.T) {
		d := standinDefault(t, base, vendors.Teams)
		// The trigger's path and query, sent to the base_url as the kind
		// does.
		hook := d.Members["webhook_url"]
		url := d.Members["base_url"] + hook[strings.Index(hook, "/workflows/"):]
		card := `{"type":"message","attachments":[{"contentType":"application/vnd.microsoft.card.adaptive","content":` +
			`{"type":"AdaptiveCard","version":"1.4","body":[{"type":"TextBlock","text":"A lead"}]}}]}`
		if resp := mustSend(t, http.MethodPost, url, card, "Content-Type", "application/json"); resp.StatusCode != http.StatusAccepted {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("the trigger: %d %s, want 202", resp.StatusCode, b)
		}
		bad := strings.Replace(url, "sig=", "sig=x", 1)
		if resp := mustSend(t, http.MethodPost, bad, card, "Content-Type", "application/json"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the trigger with another sig: %d, want 401", resp.StatusCode)
		}
		if st := standinState(t, base, vendors.Teams); st["messages"] != float64(1) {
			t.Errorf("the stand-in's state after the card: %v", st)
		}
	})

	// The fake downstream's own routes beside them.
	if resp := mustSend(t, http.MethodPost, base+"/enrichment", `{"email":"ada@example.com"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("enrichment: %d, want 200", resp.StatusCode)
	}
	if resp := mustSend(t, http.MethodGet, base+"/_fake/state", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/_fake/state: %d", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), `"standins":["hubspot","salesforce","pipedrive","slack","teams"]`) {
		t.Errorf("the listening line does not name the stand-ins:\n%s", logs)
	}
	for _, d := range vendors.Defaults(base) {
		for k, v := range d.Members {
			if k != "base_url" && k != "instance_url" && k != "client_id" && k != "channel" && k != "ref_field" && strings.Contains(logs.String(), v) {
				t.Errorf("the logs show %s's %s", d.Name, k)
			}
		}
	}
}

// -standins (FAKE_STANDINS) chooses the stand-ins: none leaves every
// prefix to the fake downstream (404), a list serves those only, and an
// unknown name stops the command.
func TestStandinsChosen(t *testing.T) {
	t.Parallel()
	t.Run("None", func(t *testing.T) {
		t.Parallel()
		base, logs, stop := start(t, "-standins", "none")
		for _, name := range vendors.Names {
			if resp := mustSend(t, http.MethodGet, base+"/"+name+"/_standin/state", ""); resp.StatusCode != http.StatusNotFound {
				t.Errorf("/%s with none: %d, want 404", name, resp.StatusCode)
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), `"standins":null`) {
			t.Errorf("the listening line:\n%s", logs)
		}
	})
	t.Run("ListFromEnv", func(t *testing.T) {
		t.Parallel()
		base, _, stop := startEnv(t, map[string]string{"FAKE_STANDINS": "slack, hubspot"})
		for _, name := range vendors.Names {
			want := http.StatusNotFound
			if name == vendors.HubSpot || name == vendors.Slack {
				want = http.StatusOK
			}
			if resp := mustSend(t, http.MethodGet, base+"/"+name+"/_standin/state", ""); resp.StatusCode != want {
				t.Errorf("/%s with FAKE_STANDINS=slack, hubspot: %d, want %d", name, resp.StatusCode, want)
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		err := run(t.Context(), []string{"fakedownstream", "-addr", "127.0.0.1:0", "-standins", "hubspot,zoho"}, mapEnv(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `"zoho"`) {
			t.Errorf("an unknown stand-in: %v, want an error naming it", err)
		}
	})
}
