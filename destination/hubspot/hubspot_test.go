package hubspot_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/hubspot"
	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/lead"
)

const token = "pat-na1-11111111-2222-3333-4444-555555555555"

// standIn drives the HubSpot stand-in as the suite asks.
type standIn struct{ f *hubspotfake.Server }

// writes are the targets that apply a lead: the upsert and the update.
var writes = []string{hubspotfake.TargetUpsert, hubspotfake.TargetUpdate}

func (s standIn) Inject(f destinationtest.Fault) {
	for _, t := range writes {
		switch f {
		case destinationtest.LoseAnswer:
			s.f.Script(t, standin.Fault{DropAfterApply: true})
		case destinationtest.FailServer:
			s.f.Script(t, standin.Fault{Status: http.StatusBadGateway, Body: "<html>502 Bad Gateway</html>"})
		case destinationtest.RateLimit:
			s.f.Script(t, hubspotfake.RateLimitFault())
		}
	}
	switch f {
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Records() int { return s.f.Records() }

func (s standIn) Email(id string) string {
	c, ok := s.f.Contact(id)
	if !ok {
		return ""
	}
	return c.Properties["email"]
}

// start serves a stand-in and returns the destination configured for it.
func start(t *testing.T, o *hubspotfake.Options, configure func(*destination.Config)) (*hubspot.CRM, *hubspotfake.Server) {
	t.Helper()
	if o == nil {
		o = &hubspotfake.Options{}
	}
	if o.Token == "" {
		o.Token = token
	}
	f := hubspotfake.New(o)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	c := &destination.Config{Name: "acme-hubspot", Kind: hubspot.Kind, BaseURL: ts.URL, Values: map[string]string{"token": token},
		Timeout: 5 * time.Second}
	if configure != nil {
		configure(c)
	}
	if err := hubspot.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	crm, err := hubspot.Spec.NewCRM(c)
	if err != nil {
		t.Fatal(err)
	}
	return crm.(*hubspot.CRM), f
}

func TestConformance(t *testing.T) {
	destinationtest.RunCRM(t, destinationtest.CRMHarness{
		New: func(t *testing.T) (destination.CRM, destinationtest.Setup) {
			crm, f := start(t, nil, nil)
			return crm, destinationtest.Setup{StandIn: standIn{f}, Secrets: []string{token}}
		},
		Reject: func(r *destination.Record) {
			l := *r.Lead
			l.Email = "ada.lovelace.at.example.com" // HubSpot: INVALID_EMAIL
			r.Lead = &l
		},
	})
}

// record is a lead whose email has upper-case letters and a '+', to see
// both the key's lower-casing and the path's escaping.
func record(ref string) *destination.Record {
	return &destination.Record{
		LeadID: "0190c6a2-7e1a-7b3c-9d4e-000000000001", ExternalRef: ref,
		Lead: &lead.Lead{
			Email: "Ada.Lovelace+Demo@Example.com", Source: "referral", Name: "Ada King Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Website: "https://ae.example", Message: "We would like a demo.",
			Fields: map[string]string{"role": "CTO"},
		},
		Score: 85, Tier: "hot",
	}
}

// personal are the record's values no error may show.
var personal = []string{"ada.lovelace", "Ada.Lovelace", "Lovelace", "Analytical", "7946", "ae.example", "demo."}

func requireClean(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range append(personal, token) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q shows %q", err, s)
		}
	}
}

// call is one recorded request.
type call struct {
	Method, Path, Query, Auth string
	Body                      map[string]any
}

// recorder wraps a handler and keeps the requests it serves.
type recorder struct {
	h     http.Handler
	mu    sync.Mutex
	calls []call
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c := call{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")}
	_ = json.Unmarshal(b, &c.Body)
	rec.mu.Lock()
	rec.calls = append(rec.calls, c)
	rec.mu.Unlock()
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	rec.h.ServeHTTP(w, r)
}

func (rec *recorder) last(t *testing.T) call {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) == 0 {
		t.Fatal("no request")
	}
	return rec.calls[len(rec.calls)-1]
}

// recorded serves a stand-in behind a recorder.
func recorded(t *testing.T, o *hubspotfake.Options, configure func(*destination.Config)) (*hubspot.CRM, *hubspotfake.Server, *recorder) {
	t.Helper()
	if o == nil {
		o = &hubspotfake.Options{}
	}
	o.Token = token
	f := hubspotfake.New(o)
	rec := &recorder{h: f}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	c := &destination.Config{Name: "acme-hubspot", Kind: hubspot.Kind, BaseURL: ts.URL + "/", Values: map[string]string{"token": token}}
	if configure != nil {
		configure(c)
	}
	if err := hubspot.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	return hubspot.New(c), f, rec
}

func asError(t *testing.T, err error) *destination.Error {
	t.Helper()
	e, ok := destination.AsError(err)
	if !ok {
		t.Fatalf("error %v is not a *destination.Error", err)
	}
	return e
}

func TestWriteRequest(t *testing.T) {
	ctx := context.Background()
	crm, f, rec := recorded(t, &hubspotfake.Options{CustomProperties: []string{"lead_role", "lead_score", "lead_channel"}}, func(c *destination.Config) {
		m, err := destination.ParseMapping(map[string]string{"lead_role": "fields.role", "lead_score": "score", "lead_channel": "=web",
			"lead_budget_left_out": "fields.budget"})
		if err != nil {
			t.Fatal(err)
		}
		c.Map = m
	})
	r := record("li_request_shape")
	r.Owner = &destination.Owner{Name: "alice", CRMOwner: "9001"}
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	if got.Method != http.MethodPost || got.Path != "/crm/objects/"+hubspot.APIVersion+"/contacts/batch/upsert" || got.Query != "" {
		t.Errorf("request %s %s?%s", got.Method, got.Path, got.Query)
	}
	if got.Auth != "Bearer "+token {
		t.Errorf("Authorization %q", got.Auth)
	}
	inputs, _ := got.Body["inputs"].([]any)
	if len(inputs) != 1 || len(got.Body) != 1 {
		t.Fatalf("body %v: want {inputs: [one input]}", got.Body)
	}
	in := inputs[0].(map[string]any)
	want := map[string]any{
		"idProperty": "email", "id": "ada.lovelace+demo@example.com", "objectWriteTraceId": "li_request_shape",
		"properties": map[string]any{
			"email": "ada.lovelace+demo@example.com", "firstname": "Ada King", "lastname": "Lovelace", "company": "Analytical Engines",
			"phone": "+44 20 7946 0000", "website": "https://ae.example", "message": "We would like a demo.",
			"hubspot_owner_id": "9001", "lead_role": "CTO", "lead_score": "85", "lead_channel": "web",
		},
	}
	if a, b := mustJSON(t, in), mustJSON(t, want); a != b {
		t.Errorf("input\n%s\nwant\n%s", a, b)
	}
	c, ok := f.Contact(id)
	if !ok || c.Properties["email"] != "ada.lovelace+demo@example.com" || c.Properties["hubspot_owner_id"] != "9001" {
		t.Errorf("contact %s: %v", id, c.Properties)
	}

	// A lead without the optional members and without an owner sends
	// none of them: an empty value would clear the contact's.
	bare := record("li_request_shape_2")
	bare.Lead = &lead.Lead{Email: "grace@example.com", Source: "ads", Name: "Hopper"}
	if _, err := crm.Write(ctx, bare); err != nil {
		t.Fatal(err)
	}
	props := rec.last(t).Body["inputs"].([]any)[0].(map[string]any)["properties"]
	if a, b := mustJSON(t, props), mustJSON(t, map[string]any{"email": "grace@example.com", "lastname": "Hopper", "lead_score": "85", "lead_channel": "web"}); a != b {
		t.Errorf("properties %s, want %s", a, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpdateLookupAndCheckRequests(t *testing.T) {
	ctx := context.Background()
	crm, _, rec := recorded(t, nil, nil)
	r := record("li_other_requests")
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}

	got, found, err := crm.Lookup(ctx, r)
	if err != nil || !found || got != id {
		t.Fatalf("lookup: %s %v %v, want %s", got, found, err, id)
	}
	c := rec.last(t)
	if c.Method != http.MethodGet || c.Path != "/crm/objects/"+hubspot.APIVersion+"/contacts/ada.lovelace+demo@example.com" || c.Query != "idProperty=email" || c.Auth != "Bearer "+token {
		t.Errorf("lookup request %s %s?%s", c.Method, c.Path, c.Query)
	}

	amended := *r
	l := *r.Lead
	l.Email, l.Phone = "ada.king@example.com", ""
	amended.Lead, amended.Amendment = &l, 1
	if got, err := crm.Update(ctx, id, &amended); err != nil || got != id {
		t.Fatalf("update: %s %v, want %s", got, err, id)
	}
	c = rec.last(t)
	if c.Method != http.MethodPatch || c.Path != "/crm/objects/"+hubspot.APIVersion+"/contacts/"+id || c.Query != "" || c.Auth != "Bearer "+token {
		t.Errorf("update request %s %s?%s", c.Method, c.Path, c.Query)
	}
	want := map[string]any{"properties": map[string]any{
		"email": "ada.king@example.com", "firstname": "Ada King", "lastname": "Lovelace", "company": "Analytical Engines",
		"website": "https://ae.example", "message": "We would like a demo.",
	}}
	if a, b := mustJSON(t, c.Body), mustJSON(t, want); a != b {
		t.Errorf("update body %s, want %s", a, b)
	}

	if err := crm.Check(ctx); err != nil {
		t.Fatal(err)
	}
	c = rec.last(t)
	if c.Method != http.MethodGet || c.Path != "/crm/objects/"+hubspot.APIVersion+"/contacts" || c.Query != "limit=1" || c.Auth != "Bearer "+token {
		t.Errorf("check request %s %s?%s", c.Method, c.Path, c.Query)
	}
}

func TestTheContactIsThePerson(t *testing.T) {
	ctx := context.Background()
	crm, f := start(t, nil, nil)
	first := record("li_first_enquiry")
	id, err := crm.Write(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// Another enquiry (another key) from the same person, without a phone,
	// the email in other letters.
	second := record("li_second_enquiry")
	l := *second.Lead
	l.Email, l.Phone, l.Message = "ADA.LOVELACE+DEMO@EXAMPLE.COM", "", "And pricing, please."
	second.Lead = &l
	again, err := crm.Write(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if again != id || f.Records() != 1 {
		t.Fatalf("second enquiry written as %s (first %s), %d contacts: want the same contact", again, id, f.Records())
	}
	c, _ := f.Contact(id)
	if c.Properties["message"] != "And pricing, please." || c.Properties["phone"] != "+44 20 7946 0000" {
		t.Errorf("contact after the second enquiry: message %q, phone %q; want the second's message and the first's phone",
			c.Properties["message"], c.Properties["phone"])
	}
}

func TestUpdateRefusals(t *testing.T) {
	ctx := context.Background()
	crm, f := start(t, nil, nil)
	id, err := crm.Write(ctx, record("li_update_refusals"))
	if err != nil {
		t.Fatal(err)
	}
	other := record("li_someone_else")
	other.Lead = &lead.Lead{Email: "grace@example.com", Source: "ads", Name: "Grace Hopper"}
	if _, err := crm.Write(ctx, other); err != nil {
		t.Fatal(err)
	}

	t.Run("EmailOfAnotherContact", func(t *testing.T) {
		amended := record("li_update_refusals")
		amended.Lead.Email = "Grace@Example.com"
		_, err := crm.Update(ctx, id, amended)
		e := asError(t, err)
		if e.Class != destination.Rejected || e.Code != "CONFLICT" || e.Status != http.StatusConflict {
			t.Errorf("error %v (%s), want rejected CONFLICT", err, e.Class)
		}
		requireClean(t, err)
		if c, _ := f.Contact(id); c.Properties["email"] != "ada.lovelace+demo@example.com" {
			t.Errorf("contact's email became %q", c.Properties["email"])
		}
	})
	t.Run("UnknownContact", func(t *testing.T) {
		_, err := crm.Update(ctx, "999999", record("li_update_refusals"))
		e := asError(t, err)
		if e.Class != destination.Rejected || e.Code != "OBJECT_NOT_FOUND" {
			t.Errorf("error %v (%s), want rejected OBJECT_NOT_FOUND", err, e.Class)
		}
		requireClean(t, err)
	})
	t.Run("NotAContactID", func(t *testing.T) {
		before := f.State().Requests[hubspotfake.TargetUpdate]
		_, err := crm.Update(ctx, "../batch", record("li_update_refusals"))
		if e := asError(t, err); e.Class != destination.Rejected {
			t.Errorf("error %v, want rejected", err)
		}
		if n := f.State().Requests[hubspotfake.TargetUpdate]; n != before {
			t.Errorf("%d update requests for an id that is none", n-before)
		}
	})
	if n := f.Records(); n != 2 {
		t.Errorf("%d contacts, want 2", n)
	}
}

func TestLookupOfAnotherEmail(t *testing.T) {
	crm, _ := start(t, nil, nil)
	id, found, err := crm.Lookup(context.Background(), record("li_nobody"))
	if err != nil || found || id != "" {
		t.Errorf("lookup of an email no contact has: %q %v %v", id, found, err)
	}
}

// TestPortalRefusals: what a portal refuses rejects the lead, naming the
// code and the property, never a value.
func TestPortalRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		opts      hubspotfake.Options
		mapping   map[string]string
		owner     string
		code      string
		property  string
		accepted  bool
		configure func(*destination.Config)
	}{
		{name: "PropertyDoesNotExist", mapping: map[string]string{"favourite_colour": "=blue"}, code: "PROPERTY_DOESNT_EXIST", property: "favourite_colour"},
		{name: "RequiredOnCreate", opts: hubspotfake.Options{RequiredOnCreate: []string{"jobtitle"}}, code: "MISSING_REQUIRED_PROPERTY", property: "jobtitle"},
		{name: "RequiredOnCreateMet", opts: hubspotfake.Options{RequiredOnCreate: []string{"jobtitle"}}, mapping: map[string]string{"jobtitle": "fields.role"}, accepted: true},
		{name: "UnknownOwner", opts: hubspotfake.Options{Owners: []string{"9001"}}, owner: "9002", code: "INVALID_OPTION", property: "hubspot_owner_id"},
		{name: "KnownOwner", opts: hubspotfake.Options{Owners: []string{"9001"}}, owner: "9001", accepted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			crm, f := start(t, &opts, func(c *destination.Config) {
				m, err := destination.ParseMapping(tc.mapping)
				if err != nil {
					t.Fatal(err)
				}
				c.Map = m
			})
			r := record("li_portal_" + tc.name)
			if tc.owner != "" {
				r.Owner = &destination.Owner{Name: "alice", CRMOwner: tc.owner}
			}
			_, err := crm.Write(ctx, r)
			if tc.accepted {
				if err != nil || f.Records() != 1 {
					t.Fatalf("error %v, %d contacts; want accepted", err, f.Records())
				}
				return
			}
			e := asError(t, err)
			if e.Class != destination.Rejected || e.Code != tc.code || e.Uncertain || !strings.Contains(err.Error(), "property "+tc.property) {
				t.Errorf("error %q (%s), want rejected %s naming %s", err, e.Class, tc.code, tc.property)
			}
			requireClean(t, err)
			if n := f.Records(); n != 0 {
				t.Errorf("%d contacts", n)
			}
		})
	}
}

func TestRateLimitHoldsTheDestination(t *testing.T) {
	ctx := context.Background()
	crm, f := start(t, &hubspotfake.Options{TenSecondLimit: 2}, nil)
	for i := range 2 {
		if _, err := crm.Write(ctx, record("li_limited")); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	_, err := crm.Write(ctx, record("li_limited"))
	e := asError(t, err)
	if e.Class != destination.Transient || !e.HoldAll || e.RetryAfter != 10*time.Second || e.Uncertain || e.Code != "TEN_SECONDLY_ROLLING" {
		t.Errorf("error %v: class %s, hold all %v, retry after %v, uncertain %v; want a 10 s hold of every call",
			err, e.Class, e.HoldAll, e.RetryAfter, e.Uncertain)
	}
	if n := f.Records(); n != 1 {
		t.Errorf("%d contacts", n)
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		crm, _ := start(t, nil, nil)
		if err := crm.Check(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("RefusedToken", func(t *testing.T) {
		crm, f := start(t, nil, nil)
		f.SetRefuseCredentials(true)
		err := crm.Check(ctx)
		if e := asError(t, err); e.Class != destination.Unauthorized || e.Code != "INVALID_AUTHENTICATION" {
			t.Errorf("error %v, want unauthorized INVALID_AUTHENTICATION", err)
		}
		requireClean(t, err)
	})
	t.Run("ReadOnlyKey", func(t *testing.T) {
		// A key without the write scope reads; its writes are refused as
		// credentials, not as the lead's fault.
		crm, _ := start(t, &hubspotfake.Options{ReadOnly: true}, nil)
		if err := crm.Check(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := crm.Write(ctx, record("li_read_only"))
		if e := asError(t, err); e.Class != destination.Unauthorized || e.Code != "MISSING_SCOPES" {
			t.Errorf("error %v, want unauthorized MISSING_SCOPES", err)
		}
	})
	t.Run("WrongBaseURL", func(t *testing.T) {
		crm, _ := start(t, nil, func(c *destination.Config) { c.BaseURL += "/proxy" })
		err := crm.Check(ctx)
		if e := asError(t, err); e.Class != destination.Transient || e.Status != http.StatusNotFound {
			t.Errorf("error %v, want transient 404", err)
		}
	})
}

func TestSteps(t *testing.T) {
	crm, _ := start(t, nil, nil)
	var mu sync.Mutex
	var steps []string
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, o.Step+" "+o.Outcome)
	})
	r := record("li_steps")
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := crm.Lookup(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := crm.Update(ctx, id, r); err != nil {
		t.Fatal(err)
	}
	if err := crm.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(steps, ", "), "crm 200, crm_lookup 200, crm 200"; got != want {
		t.Errorf("steps %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	const secret = "pat-na1-secret value"
	for _, tc := range []struct {
		name  string
		c     destination.Config
		map_  map[string]string
		error string
	}{
		{name: "OK", c: destination.Config{Values: map[string]string{"token": token}}},
		{name: "OKWithBaseURLAndMap", c: destination.Config{BaseURL: "https://eu1.proxy.example/hubspot", Values: map[string]string{"token": token}},
			map_: map[string]string{"jobtitle": "fields.role", "lead_score": "score"}},
		{name: "NoToken", c: destination.Config{}, error: "token is required"},
		{name: "TokenWithSpace", c: destination.Config{Values: map[string]string{"token": secret}}, error: "token must be one line"},
		{name: "TokenWithNewline", c: destination.Config{Values: map[string]string{"token": "pat-na1-x\n"}}, error: "token must be one line"},
		{name: "BaseURLWithQuery", c: destination.Config{BaseURL: "https://proxy.example/?key=" + secret, Values: map[string]string{"token": token}},
			error: "base_url must be"},
		{name: "BaseURLNotHTTP", c: destination.Config{BaseURL: "ftp://proxy.example", Values: map[string]string{"token": token}},
			error: "base_url must be an absolute http(s) URL"},
		{name: "MapEmail", c: destination.Config{Values: map[string]string{"token": token}}, map_: map[string]string{"email": "email"},
			error: "map: email is the contact's key"},
		{name: "MapNotInternalName", c: destination.Config{Values: map[string]string{"token": token}}, map_: map[string]string{"Job.Title": "fields.role"},
			error: "map: Job.Title is not a HubSpot property's internal name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			m, err := destination.ParseMapping(tc.map_)
			if err != nil {
				t.Fatal(err)
			}
			c.Map = m
			err = hubspot.Spec.Validate(&c)
			switch {
			case tc.error == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.error != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.error)):
				t.Fatalf("error %v, want %q", err, tc.error)
			case err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "pat-na1")):
				t.Errorf("error %q shows the token", err)
			}
		})
	}
	if m := hubspot.Spec.Members; len(m) != 1 || m[0].Name != "token" || !m[0].Required || !m[0].Secret {
		t.Errorf("members %+v, want one: token, required and secret", m)
	}
	if hubspot.Spec.Serves(destination.FamilyChannel) || !hubspot.Spec.Serves(destination.FamilyCRM) {
		t.Error("the kind serves as a CRM only")
	}
}

func TestCapabilities(t *testing.T) {
	crm, _ := start(t, nil, nil)
	want := destination.CRMCapabilities{Upsert: true, ConsistentLookup: true, UpdateByID: true}
	if got := crm.Capabilities(); got != want {
		t.Errorf("capabilities %+v, want %+v", got, want)
	}
	if _, ok := any(crm).(destination.Checker); !ok {
		t.Error("the kind is not a destination.Checker")
	}
	if p, err := crm.Prepare(context.Background(), record("li_prepare")); p != "" || err != nil {
		t.Errorf("prepare: %q %v", p, err)
	}
}

// canned is an answer a test server gives to every request.
type canned struct {
	status int
	header map[string]string
	body   string
}

func cannedCRM(t *testing.T, a canned) *hubspot.CRM {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(ts.Close)
	return hubspot.New(&destination.Config{Name: "acme-hubspot", Kind: hubspot.Kind, BaseURL: ts.URL, Values: map[string]string{"token": token}})
}

// Bodies as HubSpot sends them: their messages quote the lead's values.
const (
	invalidEmail207 = `{"status":"COMPLETE","results":[],"numErrors":1,"errors":[{"status":"error","category":"VALIDATION_ERROR",` +
		`"message":"Property values were not valid: [{\"isValid\":false,\"message\":\"Email address ada.lovelace+demo@example.com is invalid\",\"error\":\"INVALID_EMAIL\",\"name\":\"email\"}]",` +
		`"context":{"objectWriteTraceId":["li_1"]},"errors":[{"message":"Email address ada.lovelace+demo@example.com is invalid","code":"INVALID_EMAIL","context":{"propertyName":["email"]}}]}]}`
	noProperty207 = `{"status":"COMPLETE","results":[],"errors":[{"status":"error","category":"VALIDATION_ERROR","message":"Property \"jobtitle\" does not exist",` +
		`"errors":[{"message":"Property \"jobtitle\" does not exist","code":"PROPERTY_DOESNT_EXIST","context":{"propertyName":["jobtitle"]}}]}]}`
	rateLimits207 = `{"status":"COMPLETE","results":[],"errors":[{"status":"error","category":"RATE_LIMITS","message":"You have reached your secondly limit."}]}`
	conflict207   = `{"status":"COMPLETE","results":[],"errors":[{"status":"error","category":"CONFLICT","message":"Contact already exists. Existing ID: 501"}]}`
	required400   = `{"status":"error","category":"VALIDATION_ERROR","message":"The property values provided are invalid","errors":[{"code":"MISSING_REQUIRED_PROPERTY",` +
		`"message":"A value for jobtitle must be provided","context":{"propertyName":["jobtitle"]}}]}`
	conditional400 = `{"category":"VALIDATION_ERROR","message":"...","errors":[{"code":"MISSING_CONDITIONAL_REQUIRED_PROPERTY",` +
		`"message":"state is required because of a conditional property rule based on [country]","context":{"propertyName":["state"]}}]}`
	legacy400 = `{"status":"error","message":"Property values were not valid: [{\"isValid\":false,\"message\":\"Email address Ada.Lovelace+Demo@Example.com is invalid\",` +
		`\"error\":\"INVALID_EMAIL\",\"name\":\"email\"}]","correlationId":"c8617a85-58a6-4a95-b619-e7d3594c170c","category":"VALIDATION_ERROR"}`
	stringContext400 = `{"status":"error","category":"VALIDATION_ERROR","message":"Invalid input (ada.lovelace+demo@example.com)","errors":[{"message":"x","code":"INVALID_INTEGER","context":"{missingScopes=[a]}"}]}`
	nonUnique400     = `{"status":"error","message":"Unable to perform update/upsert by non-unique 0-1 property email in portal ID 1","category":"VALIDATION_ERROR"}`
	auth401          = `{"status":"error","message":"Authentication credentials not found.","correlationId":"x","category":"INVALID_AUTHENTICATION"}`
	scopes403        = `{"status":"error","message":"This app hasn't been granted all required scopes to make this call.","category":"MISSING_SCOPES",` +
		`"errors":[{"message":"One or more of the following scopes are required.","context":{"requiredGranularScopes":["crm.objects.contacts.write"]}}]}`
	tenSecondly429 = `{"status":"error","message":"You have reached your ten_secondly_rolling limit.","errorType":"RATE_LIMIT","correlationId":"x","policyName":"TEN_SECONDLY_ROLLING","groupName":"publicapi:service-key"}`
	daily429       = `{"status":"error","message":"You have reached your daily limit.","errorType":"RATE_LIMIT","policyName":"DAILY"}`
	secondly429    = `{"status":"error","message":"You have reached your secondly limit.","errorType":"RATE_LIMIT","policyName":"SECONDLY"}`
	category429    = `{"status":"error","message":"Rate limit exceeded","category":"RATE_LIMITS"}`
	conflict409    = `{"status":"error","message":"Contact already exists. Existing ID: 501","correlationId":"x","category":"CONFLICT"}`
	notFound404    = `{"status":"error","message":"resource not found","correlationId":"x","category":"OBJECT_NOT_FOUND"}`
	html404        = `<html><body><h2>404 Not Found</h2></body></html>`
)

func TestClassification(t *testing.T) {
	ctx := context.Background()
	type want struct {
		class      destination.Class
		code       string
		uncertain  bool
		retryAfter time.Duration
		holdAll    bool
		detail     string // in the message
	}
	for _, tc := range []struct {
		name   string
		op     string // upsert (default), update, lookup, check
		answer canned
		want   want
	}{
		{name: "InvalidEmail207", answer: canned{status: 207, body: invalidEmail207},
			want: want{class: destination.Rejected, code: "INVALID_EMAIL", detail: "VALIDATION_ERROR, property email"}},
		{name: "PropertyDoesNotExist207", answer: canned{status: 207, body: noProperty207},
			want: want{class: destination.Rejected, code: "PROPERTY_DOESNT_EXIST", detail: "property jobtitle"}},
		{name: "RateLimits207", answer: canned{status: 207, body: rateLimits207}, want: want{class: destination.Transient, code: "RATE_LIMITS"}},
		{name: "Conflict207", answer: canned{status: 207, body: conflict207}, want: want{class: destination.Transient, code: "CONFLICT"}},
		{name: "MissingRequiredProperty", answer: canned{status: 400, body: required400},
			want: want{class: destination.Rejected, code: "MISSING_REQUIRED_PROPERTY", detail: "property jobtitle"}},
		{name: "MissingConditionalRequiredProperty", answer: canned{status: 400, body: conditional400},
			want: want{class: destination.Rejected, code: "MISSING_CONDITIONAL_REQUIRED_PROPERTY", detail: "property state"}},
		{name: "OlderShape", answer: canned{status: 400, body: legacy400}, want: want{class: destination.Rejected, code: "INVALID_EMAIL", detail: "property email"}},
		{name: "ContextAsText", answer: canned{status: 400, body: stringContext400}, want: want{class: destination.Rejected, code: "INVALID_INTEGER"}},
		{name: "NonUniqueIDProperty", answer: canned{status: 400, body: nonUnique400}, want: want{class: destination.Rejected, code: "VALIDATION_ERROR"}},
		{name: "BadRequestWithoutBody", answer: canned{status: 400}, want: want{class: destination.Rejected}},
		{name: "Unauthorized", answer: canned{status: 401, body: auth401}, want: want{class: destination.Unauthorized, code: "INVALID_AUTHENTICATION"}},
		{name: "MissingScopes", answer: canned{status: 403, body: scopes403}, want: want{class: destination.Unauthorized, code: "MISSING_SCOPES"}},
		{name: "TenSecondly", answer: canned{status: 429, body: tenSecondly429, header: map[string]string{
			"X-HubSpot-RateLimit-Remaining": "0", "X-HubSpot-RateLimit-Interval-Milliseconds": "10000", "X-HubSpot-RateLimit-Max": "100"}},
			want: want{class: destination.Transient, code: "TEN_SECONDLY_ROLLING", retryAfter: 10 * time.Second, holdAll: true}},
		{name: "IntervalLongerThanRetryAfter", answer: canned{status: 429, body: tenSecondly429, header: map[string]string{
			"Retry-After": "1", "X-HubSpot-RateLimit-Remaining": "0", "X-HubSpot-RateLimit-Interval-Milliseconds": "2500"}},
			want: want{class: destination.Transient, code: "TEN_SECONDLY_ROLLING", retryAfter: 2500 * time.Millisecond, holdAll: true}},
		{name: "IntervalWithRemainingLeft", answer: canned{status: 429, body: category429, header: map[string]string{
			"X-HubSpot-RateLimit-Remaining": "3", "X-HubSpot-RateLimit-Interval-Milliseconds": "10000"}},
			want: want{class: destination.Transient, code: "RATE_LIMITS"}},
		{name: "RetryAfterOnly", answer: canned{status: 429, body: category429, header: map[string]string{"Retry-After": "3"}},
			want: want{class: destination.Transient, code: "RATE_LIMITS", retryAfter: 3 * time.Second, holdAll: true}},
		{name: "Daily", answer: canned{status: 429, body: daily429}, want: want{class: destination.Transient, code: "DAILY", retryAfter: 15 * time.Minute, holdAll: true}},
		{name: "Secondly", answer: canned{status: 429, body: secondly429}, want: want{class: destination.Transient, code: "SECONDLY", retryAfter: time.Second, holdAll: true}},
		{name: "BareTooManyRequests", answer: canned{status: 429}, want: want{class: destination.Transient}},
		{name: "Locked", answer: canned{status: 423}, want: want{class: destination.Transient, retryAfter: 2 * time.Second}},
		{name: "LockedWithRetryAfter", answer: canned{status: 423, header: map[string]string{"Retry-After": "5"}},
			want: want{class: destination.Transient, retryAfter: 5 * time.Second}},
		{name: "MigrationInProgress", answer: canned{status: 477, header: map[string]string{"Retry-After": "30"}},
			want: want{class: destination.Transient, retryAfter: 30 * time.Second, holdAll: true}},
		{name: "InternalError", answer: canned{status: 500}, want: want{class: destination.Transient, uncertain: true}},
		{name: "BadGateway", answer: canned{status: 502, body: "<html>502</html>"}, want: want{class: destination.Transient, uncertain: true}},
		{name: "Unavailable", answer: canned{status: 503, header: map[string]string{"Retry-After": "20"}},
			want: want{class: destination.Transient, uncertain: true, retryAfter: 20 * time.Second, holdAll: true}},
		{name: "GatewayTimeout", answer: canned{status: 504}, want: want{class: destination.Transient, uncertain: true}},
		{name: "WebServerDown", answer: canned{status: 521}, want: want{class: destination.Transient, uncertain: true}},
		{name: "ConflictOnUpsert", answer: canned{status: 409, body: conflict409}, want: want{class: destination.Transient, code: "CONFLICT"}},
		{name: "NoSuchPath", answer: canned{status: 404, body: html404}, want: want{class: destination.Transient}},
		{name: "SuccessWithoutResults", answer: canned{status: 200, body: `{"status":"COMPLETE","results":[]}`},
			want: want{class: destination.Transient, uncertain: true}},
		{name: "SuccessUnreadable", answer: canned{status: 200, body: `<html>`}, want: want{class: destination.Transient, uncertain: true}},
		{name: "SuccessWithoutID", answer: canned{status: 200, body: `{"status":"COMPLETE","results":[{"id":""}]}`},
			want: want{class: destination.Transient, uncertain: true}},
		{name: "UpdateNotFound", op: "update", answer: canned{status: 404, body: notFound404}, want: want{class: destination.Rejected, code: "OBJECT_NOT_FOUND"}},
		{name: "UpdateNoSuchPath", op: "update", answer: canned{status: 404, body: html404}, want: want{class: destination.Transient}},
		{name: "UpdateConflict", op: "update", answer: canned{status: 409, body: conflict409}, want: want{class: destination.Rejected, code: "CONFLICT"}},
		{name: "UpdateValidation", op: "update", answer: canned{status: 400, body: legacy400}, want: want{class: destination.Rejected, code: "INVALID_EMAIL"}},
		{name: "UpdateWithoutID", op: "update", answer: canned{status: 200, body: `{"properties":{}}`}, want: want{class: destination.Transient, uncertain: true}},
		{name: "LookupUnauthorized", op: "lookup", answer: canned{status: 401, body: auth401}, want: want{class: destination.Unauthorized, code: "INVALID_AUTHENTICATION"}},
		{name: "LookupWithoutID", op: "lookup", answer: canned{status: 200, body: `{}`}, want: want{class: destination.Transient, uncertain: true}},
		{name: "CheckUnauthorized", op: "check", answer: canned{status: 401, body: auth401}, want: want{class: destination.Unauthorized, code: "INVALID_AUTHENTICATION"}},
		{name: "CheckRateLimited", op: "check", answer: canned{status: 429, body: tenSecondly429, header: map[string]string{
			"X-HubSpot-RateLimit-Remaining": "0", "X-HubSpot-RateLimit-Interval-Milliseconds": "10000"}},
			want: want{class: destination.Transient, code: "TEN_SECONDLY_ROLLING", retryAfter: 10 * time.Second, holdAll: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crm := cannedCRM(t, tc.answer)
			r := record("li_1")
			var err error
			switch tc.op {
			case "", "upsert":
				_, err = crm.Write(ctx, r)
			case "update":
				_, err = crm.Update(ctx, "501", r)
			case "lookup":
				_, _, err = crm.Lookup(ctx, r)
			case "check":
				err = crm.Check(ctx)
			}
			e := asError(t, err)
			got := want{class: e.Class, code: e.Code, uncertain: e.Uncertain, retryAfter: e.RetryAfter, holdAll: e.HoldAll}
			wanted := tc.want
			wanted.detail = ""
			if got != wanted {
				t.Errorf("error %q:\n got %+v\nwant %+v", err, got, wanted)
			}
			if e.Status != tc.answer.status {
				t.Errorf("status %d, want %d", e.Status, tc.answer.status)
			}
			if tc.want.detail != "" && !strings.Contains(err.Error(), tc.want.detail) {
				t.Errorf("error %q does not say %q", err, tc.want.detail)
			}
			requireClean(t, err)
		})
	}
}

func TestSuccessAnswers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body, want string
		status           int
	}{
		{name: "OneResult", status: 200, body: `{"status":"COMPLETE","results":[{"id":"501","new":true,"objectWriteTraceId":"li_1"}]}`, want: "501"},
		{name: "ResultWithoutTraceID", status: 200, body: `{"status":"COMPLETE","results":[{"id":"502"}]}`, want: "502"},
		{name: "TheLeadsResultAmongOthers", status: 200, body: `{"results":[{"id":"503","objectWriteTraceId":"li_0"},{"id":"504","objectWriteTraceId":"li_1"}]}`, want: "504"},
		{name: "MultiStatusWithTheLeadsResult", status: 207, body: `{"results":[{"id":"505","objectWriteTraceId":"li_1"}],"errors":[{"category":"VALIDATION_ERROR"}]}`, want: "505"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := cannedCRM(t, canned{status: tc.status, body: tc.body}).Write(ctx, record("li_1"))
			if err != nil || id != tc.want {
				t.Errorf("id %q, error %v; want %s", id, err, tc.want)
			}
		})
	}
}

func TestNoEmailIsRejectedWithoutACall(t *testing.T) {
	calls := 0
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))
	t.Cleanup(ts.Close)
	crm := hubspot.New(&destination.Config{BaseURL: ts.URL, Values: map[string]string{"token": token}})
	r := record("li_no_email")
	r.Lead.Email = " "
	_, err := crm.Write(context.Background(), r)
	if e := asError(t, err); e.Class != destination.Rejected || calls != 0 {
		t.Errorf("error %v, %d calls; want rejected without a call", err, calls)
	}
}

func TestTransportErrorsShowNoSecret(t *testing.T) {
	// A dropped connection: the URL in net/http's error is the origin
	// alone, whose path could hold the email.
	f := hubspotfake.New(&hubspotfake.Options{Token: token})
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	crm := hubspot.New(&destination.Config{BaseURL: ts.URL, Values: map[string]string{"token": token}})
	f.Script(hubspotfake.TargetRead, standin.Fault{DropBeforeApply: true})
	_, _, err := crm.Lookup(context.Background(), record("li_dropped"))
	e := asError(t, err)
	if e.Class != destination.Transient || e.Status != 0 {
		t.Errorf("error %v, want transient without a status", err)
	}
	requireClean(t, err)
}
