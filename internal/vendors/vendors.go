// Package vendors serves the vendors' stand-ins together, each under a path
// prefix of its own on one listener: HubSpot at /hubspot, Salesforce at
// /salesforce, Pipedrive at /pipedrive, Slack at /slack and Teams at /teams.
// A destination reaches one through its base_url (http://ADDR/hubspot), or,
// for a webhook, through a URL under the prefix (http://ADDR/slack/services/…);
// each stand-in's control API is under its prefix too
// (http://ADDR/hubspot/_standin/state).
//
// cmd/fakedownstream serves them beside the generic fake downstream, the
// soak runs them in its own process, and the end-to-end tests in theirs.
// Each stand-in starts with its package's defaults (Defaults lists them):
// the credentials a clients file names to reach it.
package vendors

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/destination/teams/teamsfake"
)

// The stand-ins, by name; each is served under "/" + its name.
const (
	HubSpot    = "hubspot"
	Salesforce = "salesforce"
	Pipedrive  = "pipedrive"
	Slack      = "slack"
	Teams      = "teams"
)

// Names are every stand-in's name, in the order they are mounted.
var Names = []string{HubSpot, Salesforce, Pipedrive, Slack, Teams}

// ParseNames reads a choice of stand-ins: "all", "none" (or empty), or a
// comma-separated list of names. Each name is kept once, in the order of
// Names.
func ParseNames(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "all":
		return slices.Clone(Names), nil
	case "", "none":
		return nil, nil
	}
	chosen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if !slices.Contains(Names, item) {
			return nil, fmt.Errorf("unknown stand-in %q (want all, none, or some of %s)", item, strings.Join(Names, ", "))
		}
		chosen[item] = true
	}
	var out []string
	for _, n := range Names {
		if chosen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// Options configure the stand-ins; a nil member takes its package's
// defaults. Logger, when set, is given to the stand-ins that log (HubSpot,
// Slack and Teams; they log at debug level, never a path or a body).
type Options struct {
	HubSpot    *hubspotfake.Options
	Salesforce *salesforcefake.Options
	Pipedrive  *pipedrivefake.Options
	Slack      *slackfake.Options
	Teams      *teamsfake.Options
	Logger     *slog.Logger
}

// Set is the stand-ins chosen; the others are nil.
type Set struct {
	HubSpot    *hubspotfake.Server
	Salesforce *salesforcefake.Server
	Pipedrive  *pipedrivefake.Server
	Slack      *slackfake.Server
	Teams      *teamsfake.Server

	names []string
}

// New makes the stand-ins named (see Names); o may be nil.
func New(names []string, o *Options) (*Set, error) {
	if o == nil {
		o = &Options{}
	}
	s := &Set{}
	for _, n := range names {
		if slices.Contains(s.names, n) {
			continue
		}
		switch n {
		case HubSpot:
			opts := hubspotfake.Options{}
			if o.HubSpot != nil {
				opts = *o.HubSpot
			}
			if opts.Logger == nil {
				opts.Logger = o.Logger
			}
			s.HubSpot = hubspotfake.New(&opts)
		case Salesforce:
			s.Salesforce = salesforcefake.New(o.Salesforce)
		case Pipedrive:
			s.Pipedrive = pipedrivefake.New(o.Pipedrive)
		case Slack:
			opts := slackfake.Options{}
			if o.Slack != nil {
				opts = *o.Slack
			}
			if opts.Logger == nil {
				opts.Logger = o.Logger
			}
			s.Slack = slackfake.New(&opts)
		case Teams:
			opts := teamsfake.Options{}
			if o.Teams != nil {
				opts = *o.Teams
			}
			if opts.Logger == nil {
				opts.Logger = o.Logger
			}
			s.Teams = teamsfake.New(&opts)
		default:
			return nil, fmt.Errorf("unknown stand-in %q", n)
		}
		s.names = append(s.names, n)
	}
	return s, nil
}

// Names are the stand-ins of the set, in the order of Names.
func (s *Set) Names() []string {
	var out []string
	for _, n := range Names {
		if slices.Contains(s.names, n) {
			out = append(out, n)
		}
	}
	return out
}

// handler is the stand-in name, nil when it is not in the set.
func (s *Set) handler(name string) http.Handler {
	switch name {
	case HubSpot:
		if s.HubSpot != nil {
			return s.HubSpot
		}
	case Salesforce:
		if s.Salesforce != nil {
			return s.Salesforce
		}
	case Pipedrive:
		if s.Pipedrive != nil {
			return s.Pipedrive
		}
	case Slack:
		if s.Slack != nil {
			return s.Slack
		}
	case Teams:
		if s.Teams != nil {
			return s.Teams
		}
	}
	return nil
}

// Mount serves each stand-in of the set on mux under "/" + its name: a
// request for /hubspot/crm/objects/… reaches HubSpot's stand-in as
// /crm/objects/…, its query (a Teams sig) untouched.
func (s *Set) Mount(mux *http.ServeMux) {
	for _, n := range s.Names() {
		mux.Handle("/"+n+"/", http.StripPrefix("/"+n, s.handler(n)))
	}
}

// Handler serves the set alone (404 for any other path).
func (s *Set) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Mount(mux)
	return mux
}

// Close ends the requests the stand-ins hold hung (call it before closing
// the HTTP server that serves them).
func (s *Set) Close() {
	if s.HubSpot != nil {
		s.HubSpot.Close()
	}
	if s.Salesforce != nil {
		s.Salesforce.Close()
	}
	if s.Pipedrive != nil {
		s.Pipedrive.Close()
	}
	if s.Slack != nil {
		s.Slack.Close()
	}
	if s.Teams != nil {
		s.Teams.Close()
	}
}

// Base is the base_url of the stand-in name on a server whose origin is
// origin (http://127.0.0.1:9090).
func Base(origin, name string) string { return strings.TrimRight(origin, "/") + "/" + name }

// Default is what a clients file names to reach a stand-in with its
// package's defaults: its members, besides name, kind and base_url.
type Default struct {
	Name string
	Kind string
	// Members are the destination's members, secrets included (the
	// stand-ins' defaults, which guard nothing).
	Members map[string]string
}

// Defaults are the clients-file members that reach each stand-in under its
// package's default options, at origin: the base_url of the API kinds, the
// whole URL of the webhooks (Slack's incoming webhook, Teams' trigger).
func Defaults(origin string) []Default {
	return []Default{
		{HubSpot, "hubspot", map[string]string{"base_url": Base(origin, HubSpot), "token": hubspotfake.DefaultToken}},
		{Salesforce, "salesforce", map[string]string{
			"base_url":     Base(origin, Salesforce),
			"instance_url": "https://standin.my.salesforce.com", "client_id": salesforcefake.DefaultClientID,
			"client_secret": salesforcefake.DefaultClientSecret, "ref_field": salesforcefake.DefaultRefField,
		}},
		{Pipedrive, "pipedrive", map[string]string{
			"base_url": Base(origin, Pipedrive), "api_token": pipedrivefake.DefaultToken, "ref_field": pipedrivefake.DefaultRefField,
		}},
		{Slack, "slack", map[string]string{"base_url": Base(origin, Slack), "token": slackfake.DefaultToken, "channel": slackfake.DefaultChannel}},
		{Slack + "-webhook", "slack", map[string]string{"webhook_url": Base(origin, Slack) + slackfake.DefaultWebhook}},
		{Teams, "teams", map[string]string{
			// Teams wants an https URL; base_url sends it to the stand-in.
			"base_url": Base(origin, Teams),
			"webhook_url": "https://standin.logic.azure.com:443/workflows/" + teamsfake.DefaultWorkflow +
				"/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + teamsfake.DefaultSig,
		}},
	}
}
