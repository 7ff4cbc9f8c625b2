package pipedrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/pipedrive"
	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/lead"
)

const (
	token    = "pd-secret-token-5f0c2a9e81"
	refField = "9c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d"
	// budgetKey is another text deal field a map writes.
	budgetKey = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9"
)

// standIn drives the stand-in as the suite asks.
type standIn struct{ f *pipedrivefake.Server }

func (s standIn) Inject(f destinationtest.Fault) {
	switch f {
	case destinationtest.LoseAnswer:
		// The next write of the lead, a create or an update.
		s.f.Script(pipedrivefake.TargetLeadsCreate, standin.Fault{DropAfterApply: true})
		s.f.Script(pipedrivefake.TargetLeadsUpdate, standin.Fault{DropAfterApply: true})
	case destinationtest.FailServer:
		s.f.Script(pipedrivefake.TargetAny, pipedrivefake.ServerErrorFault())
	case destinationtest.RateLimit:
		s.f.Script(pipedrivefake.TargetAny, pipedrivefake.RateLimitFault(2))
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Records() int { return len(s.f.Leads()) }

func (s standIn) Email(id string) string { return s.f.PersonEmail(id) }

// setup starts a stand-in (opts may be nil) and returns it with a
// destination configured for it; mod edits the configuration first.
func setup(t *testing.T, opts *pipedrivefake.Options, mod func(*destination.Config)) (*pipedrive.CRM, *pipedrivefake.Server, string) {
	t.Helper()
	o := pipedrivefake.Options{Token: token, RefField: refField, FieldKeys: []string{budgetKey}, Users: []int64{1, 7}}
	if opts != nil {
		o = *opts
	}
	f := pipedrivefake.New(&o)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return newCRM(t, ts.URL, mod), f, ts.URL
}

func newCRM(t *testing.T, base string, mod func(*destination.Config)) *pipedrive.CRM {
	t.Helper()
	c := &destination.Config{Name: "acme-pipedrive", Kind: pipedrive.Kind, BaseURL: base,
		Values: map[string]string{"api_token": token, "ref_field": refField}}
	if mod != nil {
		mod(c)
	}
	if err := pipedrive.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	crm, err := pipedrive.Spec.NewCRM(c)
	if err != nil {
		t.Fatal(err)
	}
	return crm.(*pipedrive.CRM)
}

func TestConformance(t *testing.T) {
	destinationtest.RunCRM(t, destinationtest.CRMHarness{
		New: func(t *testing.T) (destination.CRM, destinationtest.Setup) {
			crm, f, _ := setup(t, nil, nil)
			return crm, destinationtest.Setup{StandIn: standIn{f}, Secrets: []string{token}}
		},
		Reject: func(r *destination.Record) {
			// Pipedrive refuses a lead whose owner is not one of the
			// company's users.
			r.Owner = &destination.Owner{Name: "gone", CRMOwner: "424242"}
		},
	})
}

// TestLostLeadAnswerWhileSearchLagsMakesOneLead: the lead's create is
// applied and its answer lost while the person search lags far behind. The
// person prepared is kept with the lead, so the repeat looks among that
// person's leads (a list, which does not lag) and finds the lead: one
// person, one lead. Were the person searched again, the search would miss
// it, a second person would be made and the look-up under it would find
// nothing: a second lead.
func TestLostLeadAnswerWhileSearchLagsMakesOneLead(t *testing.T) {
	crm, f, _ := setup(t, nil, nil)
	f.SetLag(pipedrivefake.Lag{Searches: 1000, For: time.Hour})
	f.Script(pipedrivefake.TargetLeadsCreate, standin.Fault{DropAfterApply: true})
	r := destinationtest.Record(t)
	st := destinationtest.Drive(context.Background(), t, crm, r, lead.State{}, 3)
	if st.CRM != lead.CRMAccepted {
		t.Fatalf("CRM state %s, want accepted", st.CRM)
	}
	leads := f.Leads()
	if len(leads) != 1 || leads[0].ID != st.CRMID {
		t.Fatalf("leads %+v, want one, %s", leads, st.CRMID)
	}
	if n := f.Persons(); n != 1 {
		t.Errorf("%d persons, want 1", n)
	}
	if n := f.Requests(pipedrivefake.TargetLeadsCreate); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
}

// TestLostPersonAnswerWhileSearchLagsMakesTwoPersons shows the residual
// risk: the person's create is applied and its answer lost while the search
// lags, so the repeat does not find the person and makes another. The lead
// is still made once.
func TestLostPersonAnswerWhileSearchLagsMakesTwoPersons(t *testing.T) {
	crm, f, _ := setup(t, nil, nil)
	f.SetLag(pipedrivefake.Lag{Searches: 1000, For: time.Hour})
	f.Script(pipedrivefake.TargetPersonsCreate, standin.Fault{DropAfterApply: true})
	f.Script(pipedrivefake.TargetLeadsCreate, standin.Fault{DropAfterApply: true})
	r := destinationtest.Record(t)
	st := destinationtest.Drive(context.Background(), t, crm, r, lead.State{}, 4)
	if st.CRM != lead.CRMAccepted {
		t.Fatalf("CRM state %s, want accepted", st.CRM)
	}
	if n := f.Persons(); n != 2 {
		t.Errorf("%d persons, want the residual risk's 2", n)
	}
	if leads := f.Leads(); len(leads) != 1 || leads[0].ID != st.CRMID {
		t.Errorf("leads %+v, want one, %s", leads, st.CRMID)
	}
	if st.CRMPrepared == "" {
		t.Error("the person was not kept with the lead")
	}
}

// recorder keeps the requests a stand-in receives.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path string
	Query        url.Values
	Header       http.Header
	Body         map[string]any
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	_ = d.Decode(&body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body})
	rec.mu.Unlock()
	rec.next.ServeHTTP(w, r)
}

func (rec *recorder) take() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := rec.reqs
	rec.reqs = nil
	return out
}

func TestRequestShapes(t *testing.T) {
	f := pipedrivefake.New(&pipedrivefake.Options{Token: token, RefField: refField, FieldKeys: []string{budgetKey}, Users: []int64{1, 7}})
	rec := &recorder{next: f}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	crm := newCRM(t, ts.URL+"/", func(c *destination.Config) {
		m, err := destination.ParseMapping(map[string]string{budgetKey: "fields.budget", "visible_to": "=3"})
		if err != nil {
			t.Fatal(err)
		}
		c.Map = m
	})
	ctx := context.Background()
	r := destinationtest.Record(t)
	r.Owner = &destination.Owner{Name: "alice", CRMOwner: "7"}

	person, err := crm.Prepare(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	reqs := rec.take()
	if len(reqs) != 2 {
		t.Fatalf("%d requests to prepare, want a search and a create", len(reqs))
	}
	search, create := reqs[0], reqs[1]
	if search.Method != http.MethodGet || search.Path != "/api/v2/persons/search" ||
		search.Query.Get("term") != r.Lead.Email || search.Query.Get("fields") != "email" || search.Query.Get("exact_match") != "true" {
		t.Errorf("search %s %s %v", search.Method, search.Path, search.Query)
	}
	if create.Method != http.MethodPost || create.Path != "/api/v2/persons" {
		t.Errorf("person create %s %s", create.Method, create.Path)
	}
	wantPerson := map[string]any{
		"name":   r.Lead.Name,
		"emails": []any{map[string]any{"value": r.Lead.Email, "primary": true, "label": "work"}},
		"phones": []any{map[string]any{"value": r.Lead.Phone, "primary": true, "label": "work"}},
	}
	if !jsonEqual(create.Body, wantPerson) {
		t.Errorf("person body %v, want %v", create.Body, wantPerson)
	}

	r.Prepared = person
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	reqs = rec.take()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/leads" {
		t.Fatalf("create: %+v", reqs)
	}
	wantLead := map[string]any{
		"title": "Analytical Engines (leadintake)", "person_id": json.Number(person), refField: r.ExternalRef,
		"owner_id": json.Number("7"), budgetKey: "10k", "visible_to": "3", "origin_id": "leadintake",
	}
	if !jsonEqual(reqs[0].Body, wantLead) {
		t.Errorf("lead body %v, want %v", reqs[0].Body, wantLead)
	}
	if ct := reqs[0].Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	if _, err := crm.Update(ctx, id, r); err != nil {
		t.Fatal(err)
	}
	reqs = rec.take()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPatch || reqs[0].Path != "/v1/leads/"+id {
		t.Fatalf("update: %+v", reqs)
	}
	delete(wantLead, "origin_id") // set once, by the create
	if !jsonEqual(reqs[0].Body, wantLead) {
		t.Errorf("update body %v, want %v", reqs[0].Body, wantLead)
	}

	if got, found, err := crm.Lookup(ctx, r); err != nil || !found || got != id {
		t.Fatalf("lookup: %s %v %v", got, found, err)
	}
	for _, q := range rec.take() {
		if q.Method != http.MethodGet || q.Path != "/v1/leads" || q.Query.Get("person_id") != person || q.Query.Get("limit") != "500" {
			t.Errorf("lookup %s %s %v", q.Method, q.Path, q.Query)
		}
	}

	// Every request carried the token in x-api-token, never in the URL.
	_ = crm.Check(ctx)
	for _, q := range append(reqs, rec.take()...) {
		if q.Header.Get("x-api-token") != token {
			t.Errorf("%s %s without the token header", q.Method, q.Path)
		}
		if strings.Contains(q.Query.Encode(), token) {
			t.Errorf("%s %s has the token in its query", q.Method, q.Path)
		}
	}
}

// jsonEqual compares a decoded body (numbers as json.Number) with want.
func jsonEqual(got map[string]any, want map[string]any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	var x, y any
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	return string(mustJSON(x)) == string(mustJSON(y))
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestTitleHoldsNoMoreThanATitleNeeds(t *testing.T) {
	r := destinationtest.Record(t)
	if got := pipedrive.Title(r); got != "Analytical Engines (leadintake)" || strings.Contains(got, r.Lead.Email) {
		t.Errorf("title %q", got)
	}
	r.Lead.Company = ""
	if got := pipedrive.Title(r); got != "Ada Lovelace (leadintake)" {
		t.Errorf("title %q", got)
	}
	r.Lead.Name = ""
	if got := pipedrive.Title(r); got != "Enquiry (leadintake)" {
		t.Errorf("title %q", got)
	}
}

func TestDeliveryLogSteps(t *testing.T) {
	crm, _, _ := setup(t, nil, nil)
	var steps []string
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
		steps = append(steps, o.Step+" "+o.Outcome)
	})
	r := destinationtest.Record(t)
	first := destinationtest.Drive(ctx, t, crm, r, lead.State{}, 1)
	want := []string{"crm_person 200", "crm_person 200", "crm 201"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	steps = nil
	again := destinationtest.Drive(ctx, t, crm, r, lead.State{RefUsedBefore: true}, 1)
	want = []string{"crm_person 200", "crm_lookup 200", "crm 200"}
	if !slices.Equal(steps, want) || again.CRMID != first.CRMID {
		t.Errorf("steps %v, want %v; written as %s, first as %s", steps, want, again.CRMID, first.CRMID)
	}
}

func TestArchivedOrConvertedLeadIsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(f *pipedrivefake.Server, id string) bool
		code string
	}{
		{"Archived", (*pipedrivefake.Server).Archive, "archived"},
		{"Converted", (*pipedrivefake.Server).Convert, "lead_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crm, f, _ := setup(t, nil, nil)
			ctx := context.Background()
			r := destinationtest.Record(t)
			first := destinationtest.Drive(ctx, t, crm, r, lead.State{}, 1)
			if first.CRM != lead.CRMAccepted || !tc.do(f, first.CRMID) {
				t.Fatalf("first write: %s", first.CRM)
			}
			// An amendment over the chain's lead.
			amended := *r
			amended.Amendment, amended.ChainCRMID = 1, first.CRMID
			st := destinationtest.Drive(ctx, t, crm, &amended, lead.State{Amendment: 1, RefUsedBefore: true, ChainCRMID: first.CRMID}, 3)
			if st.CRM != lead.CRMRejected {
				t.Errorf("amendment: CRM state %s, want rejected", st.CRM)
			}
			_, err := crm.Update(ctx, first.CRMID, r)
			e, ok := destination.AsError(err)
			if !ok || e.Class != destination.Rejected || e.Code != tc.code || e.Uncertain {
				t.Errorf("update: %v, want rejected with code %s", err, tc.code)
			}
			if n := len(f.Leads()); n > 1 {
				t.Errorf("%d leads", n)
			}
		})
	}
}

func TestLookupFindsAnArchivedLead(t *testing.T) {
	crm, f, _ := setup(t, nil, nil)
	ctx := context.Background()
	r := destinationtest.Record(t)
	st := destinationtest.Drive(ctx, t, crm, r, lead.State{}, 1)
	f.Archive(st.CRMID)
	r.Prepared = st.CRMPrepared
	id, found, err := crm.Lookup(ctx, r)
	if err != nil || !found || id != st.CRMID {
		t.Errorf("lookup: %s %v %v, want %s", id, found, err, st.CRMID)
	}
	// Written again under the same reference (a redrive): found among the
	// archived leads, which cannot be edited: rejected, not a second lead.
	again := destinationtest.Drive(ctx, t, crm, r, lead.State{RefUsedBefore: true}, 2)
	if again.CRM != lead.CRMRejected || len(f.Leads()) != 1 {
		t.Errorf("CRM state %s with %d leads, want rejected with 1", again.CRM, len(f.Leads()))
	}
}

func TestLookupReadsEveryPage(t *testing.T) {
	crm, f, _ := setup(t, &pipedrivefake.Options{Token: token, RefField: refField, PageMax: 2}, nil)
	ctx := context.Background()
	base := destinationtest.Record(t)
	var last *destination.Record
	var prepared string
	for i := range 5 {
		r := *base
		r.ExternalRef = base.ExternalRef + "_" + string(rune('a'+i))
		st := destinationtest.Drive(ctx, t, crm, &r, lead.State{CRMPrepared: prepared}, 1)
		if st.CRM != lead.CRMAccepted {
			t.Fatalf("lead %d: %s", i, st.CRM)
		}
		prepared, last = st.CRMPrepared, &r
	}
	before := f.Requests(pipedrivefake.TargetLeadsList)
	last.Prepared = prepared
	if _, found, err := crm.Lookup(ctx, last); err != nil || !found {
		t.Fatalf("the fifth lead: found %v, error %v", found, err)
	}
	if n := f.Requests(pipedrivefake.TargetLeadsList) - before; n != 3 {
		t.Errorf("%d pages read, want 3", n)
	}
	missing := *last
	missing.ExternalRef += "_none"
	if _, found, err := crm.Lookup(ctx, &missing); err != nil || found {
		t.Errorf("an unknown reference: found %v, error %v", found, err)
	}
}

func TestRateLimitHoldsTheDestination(t *testing.T) {
	crm, f, _ := setup(t, nil, nil)
	ctx := context.Background()
	f.Script(pipedrivefake.TargetAny, pipedrivefake.RateLimitFault(5))
	_, err := crm.Prepare(ctx, destinationtest.Record(t))
	e, ok := destination.AsError(err)
	if !ok || e.Class != destination.Transient || !e.HoldAll || e.RetryAfter != 5*time.Second || e.Uncertain {
		t.Errorf("%v (%+v), want a transient hold of 5s", err, e)
	}
	r := standin.Fault{Status: 429, RetryAfter: "9", Header: map[string]string{"x-ratelimit-reset": "5"}}
	f.Script(pipedrivefake.TargetAny, r)
	_, err = crm.Prepare(ctx, destinationtest.Record(t))
	if e, ok := destination.AsError(err); !ok || !e.HoldAll || e.RetryAfter != 9*time.Second {
		t.Errorf("%v, want Retry-After's 9s first", err)
	}
}

func TestAnOwnerThatIsNoUserIDRejectsWithoutACall(t *testing.T) {
	crm, f, _ := setup(t, nil, nil)
	r := destinationtest.Record(t)
	r.Prepared = "1"
	r.Owner = &destination.Owner{Name: "alice", CRMOwner: "alice@acme.example"}
	_, err := crm.Write(context.Background(), r)
	e, ok := destination.AsError(err)
	if !ok || e.Class != destination.Rejected || e.Code != "invalid_owner" || strings.Contains(err.Error(), "alice") {
		t.Errorf("%v, want rejected invalid_owner without the value", err)
	}
	if n := f.Requests(pipedrivefake.TargetLeadsCreate); n != 0 {
		t.Errorf("%d creates", n)
	}
}

func TestUnknownFieldKeyIsRejected(t *testing.T) {
	crm, f, _ := setup(t, nil, func(c *destination.Config) {
		m, _ := destination.ParseMapping(map[string]string{"ffffffffffffffffffffffffffffffffffffffff": "company"})
		c.Map = m
	})
	st := destinationtest.Drive(context.Background(), t, crm, destinationtest.Record(t), lead.State{}, 1)
	if st.CRM != lead.CRMRejected || len(f.Leads()) != 0 {
		t.Errorf("CRM state %s with %d leads, want rejected", st.CRM, len(f.Leads()))
	}
	_, err := crm.Write(context.Background(), destinationtest.Record(t))
	if e, ok := destination.AsError(err); !ok || e.Code != "ERR_SCHEMA_VALIDATION_FAILED" {
		t.Errorf("%v, want Pipedrive's code", err)
	}
}

func TestValidate(t *testing.T) {
	good := func() *destination.Config {
		return &destination.Config{Name: "p", Kind: pipedrive.Kind, Values: map[string]string{"api_token": token, "ref_field": refField}}
	}
	if err := pipedrive.Spec.Validate(good()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mod    func(*destination.Config)
		member string
	}{
		{"NoToken", func(c *destination.Config) { delete(c.Values, "api_token") }, "api_token"},
		{"TokenOfTwoLines", func(c *destination.Config) { c.Values["api_token"] = token + "\nx: y" }, "api_token"},
		{"TokenWithASpace", func(c *destination.Config) { c.Values["api_token"] = "a " + token }, "api_token"},
		{"NoRefField", func(c *destination.Config) { delete(c.Values, "ref_field") }, "ref_field"},
		{"RefFieldByName", func(c *destination.Config) { c.Values["ref_field"] = "LeadIntake reference" }, "ref_field"},
		{"RefFieldTooShort", func(c *destination.Config) { c.Values["ref_field"] = refField[:39] }, "ref_field"},
		{"RefFieldUpperCase", func(c *destination.Config) { c.Values["ref_field"] = strings.ToUpper(refField) }, "ref_field"},
		{"BaseURLWithAQuery", func(c *destination.Config) { c.BaseURL = "https://acme.pipedrive.com?api_token=" + token }, "base_url"},
		{"BaseURLNotHTTP", func(c *destination.Config) { c.BaseURL = "ftp://acme.pipedrive.com" }, "base_url"},
		{"MapWritesTheTitle", func(c *destination.Config) { c.Map = destination.Mapping{{Field: "title", Source: "company"}} }, "title"},
		{"MapWritesThePerson", func(c *destination.Config) { c.Map = destination.Mapping{{Field: "person_id", Const: "1"}} }, "person_id"},
		{"MapWritesTheReference", func(c *destination.Config) { c.Map = destination.Mapping{{Field: refField, Source: "lead_id"}} }, refField},
		{"MapWritesTheOwner", func(c *destination.Config) { c.Map = destination.Mapping{{Field: "owner_id", Const: "7"}} }, "owner_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.mod(c)
			err := pipedrive.Spec.Validate(c)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.member) || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: want one line naming %s, without the token", err, tt.member)
			}
		})
	}
	var secret, required []string
	for _, m := range pipedrive.Spec.Members {
		if m.Secret {
			secret = append(secret, m.Name)
		}
		if m.Required {
			required = append(required, m.Name)
		}
	}
	if !slices.Equal(secret, []string{"api_token"}) || !slices.Equal(required, []string{"api_token", "ref_field"}) {
		t.Errorf("secret %v, required %v", secret, required)
	}
	if !pipedrive.Spec.Serves(destination.FamilyCRM) || pipedrive.Spec.Serves(destination.FamilyChannel) {
		t.Error("the kind serves CRMs only")
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		crm, f, _ := setup(t, nil, nil)
		if err := crm.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if f.Requests(pipedrivefake.TargetUsersMe) != 1 || f.Requests(pipedrivefake.TargetDealFields) != 1 {
			t.Error("want one read of the user and one of the field")
		}
		if st := f.State(); st.Leads+st.ArchivedLeads+st.Persons != 0 {
			t.Errorf("the check changed something: %+v", st)
		}
	})
	t.Run("RefusedToken", func(t *testing.T) {
		crm, f, _ := setup(t, nil, nil)
		f.SetRefuseCredentials(true)
		err := crm.Check(ctx)
		if e, ok := destination.AsError(err); !ok || e.Class != destination.Unauthorized || strings.Contains(err.Error(), token) {
			t.Errorf("%v, want unauthorized without the token", err)
		}
	})
	t.Run("MissingField", func(t *testing.T) {
		crm, _, _ := setup(t, &pipedrivefake.Options{Token: token, RefField: budgetKey}, nil)
		err := crm.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), refField) || !strings.Contains(err.Error(), "not among the deal fields") {
			t.Errorf("%v, want the field named as missing", err)
		}
	})
	t.Run("NotAText", func(t *testing.T) {
		crm, _, _ := setup(t, &pipedrivefake.Options{Token: token, RefField: refField, RefFieldType: "double"}, nil)
		err := crm.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), refField) || !strings.Contains(err.Error(), "double") {
			t.Errorf("%v, want the field named with its type", err)
		}
	})
	t.Run("LargeText", func(t *testing.T) {
		crm, _, _ := setup(t, &pipedrivefake.Options{Token: token, RefField: refField, RefFieldType: "text"}, nil)
		if err := crm.Check(ctx); err != nil {
			t.Error(err)
		}
	})
}

func TestCapabilities(t *testing.T) {
	crm, _, _ := setup(t, nil, nil)
	want := destination.CRMCapabilities{Upsert: false, ConsistentLookup: true, UpdateByID: true, Prepares: true}
	if got := crm.Capabilities(); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}
