package salesforce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/kinds"
	"github.com/leadintake/leadintake/destination/salesforce"
	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/lead"
)

const (
	clientID     = "3MVG9test.consumer.key"
	clientSecret = "s3cr3t-consumer-secret-7f1e"
)

// standIn drives the Salesforce stand-in as the suite asks.
type standIn struct{ f *salesforcefake.Server }

func (s standIn) Inject(f destinationtest.Fault) {
	switch f {
	case destinationtest.LoseAnswer:
		s.f.Script(salesforcefake.TargetUpsert, standin.Fault{DropAfterApply: true})
	case destinationtest.FailServer:
		s.f.Script(salesforcefake.TargetUpsert, salesforcefake.ServerErrorFault())
	case destinationtest.RateLimit:
		s.f.Script(salesforcefake.TargetUpsert, salesforcefake.RequestLimitFault())
	case destinationtest.RefuseCredentials:
		s.f.SetRefuseCredentials(true)
	case destinationtest.Restore:
		s.f.SetRefuseCredentials(false)
	}
}

func (s standIn) Records() int { return s.f.Count() }

func (s standIn) Email(id string) string { return s.f.Email(id) }

// config is a destination of the kind whose calls go to base.
func config(base string, values ...string) *destination.Config {
	c := &destination.Config{Name: "acme-salesforce", Kind: salesforce.Kind, BaseURL: base, Values: map[string]string{
		"instance_url": "https://acme.my.salesforce.com", "client_id": clientID, "client_secret": clientSecret,
	}}
	for i := 0; i+1 < len(values); i += 2 {
		c.Values[values[i]] = values[i+1]
	}
	return c
}

// newCRM starts a stand-in with opts and returns the kind configured for
// it by c (nil: config).
func newCRM(t *testing.T, opts *salesforcefake.Options, c *destination.Config) (*salesforce.CRM, *salesforcefake.Server) {
	t.Helper()
	o := salesforcefake.Options{ClientID: clientID, ClientSecret: clientSecret}
	if opts != nil {
		o = *opts
		o.ClientID, o.ClientSecret = clientID, clientSecret
	}
	f := salesforcefake.New(&o)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	if c == nil {
		c = config("")
	}
	c.BaseURL = ts.URL
	if err := salesforce.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	crm, err := salesforce.Spec.NewCRM(c)
	if err != nil {
		t.Fatal(err)
	}
	return crm.(*salesforce.CRM), f
}

func TestConformance(t *testing.T) {
	destinationtest.RunCRM(t, destinationtest.CRMHarness{
		New: func(t *testing.T) (destination.CRM, destinationtest.Setup) {
			crm, f := newCRM(t, nil, nil)
			return crm, destinationtest.Setup{StandIn: standIn{f}, Secrets: []string{clientSecret}}
		},
		Reject: func(r *destination.Record) {
			l := *r.Lead
			l.Email = "ada.lovelace.example.com" // Salesforce refuses it: INVALID_EMAIL_ADDRESS
			r.Lead = &l
		},
	})
}

func TestSpecIsAKind(t *testing.T) {
	s, ok := kinds.Lookup(salesforce.Kind)
	if !ok || s != &salesforce.Spec {
		t.Fatalf("kinds.Lookup(%q) = %v, %v; want the salesforce Spec", salesforce.Kind, s, ok)
	}
	if !s.Serves(destination.FamilyCRM) || s.Serves(destination.FamilyChannel) {
		t.Error("the kind serves CRMs only")
	}
}

func record(ref string) *destination.Record {
	return &destination.Record{
		LeadID: "0190c6a2-7e1a-7b3c-9d4e-000000000001", ExternalRef: ref,
		Lead: &lead.Lead{
			Email: "ada@example.com", Source: "referral", Name: "Ada Augusta Lovelace", Company: "Analytical Engines",
			Phone: "+44 20 7946 0000", Website: "https://ae.example", Message: "We would like a demo.",
			Fields: map[string]string{"role": "CTO"},
		},
		Score: 85, Tier: "hot",
	}
}

// captured is one request a capturing server received.
type captured struct {
	method, path, rawPath, query string
	header                       http.Header
	body                         []byte
}

// capture serves the token endpoint with token tok and answers every
// other request with answer, recording them all.
type capture struct {
	mu       sync.Mutex
	reqs     []captured
	tokenAns func() (int, string)
	answer   func(r *http.Request) (int, http.Header, string)
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, captured{r.Method, r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), b})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/services/oauth2/token" {
		status, body := http.StatusOK, `{"access_token":"00Dtok!abc","instance_url":"https://acme.my.salesforce.com","token_type":"Bearer","scope":"api","id":"x","issued_at":"1","signature":"s"}`
		if c.tokenAns != nil {
			status, body = c.tokenAns()
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
		return
	}
	status, h, body := http.StatusCreated, http.Header(nil), `{"id":"00Q000000000001AAA","success":true,"errors":[],"created":true}`
	if c.answer != nil {
		status, h, body = c.answer(r)
	}
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (c *capture) requests(path string) []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []captured
	for _, r := range c.reqs {
		if path == "" || strings.HasPrefix(r.path, path) {
			out = append(out, r)
		}
	}
	return out
}

func captureCRM(t *testing.T, c *capture, cfg *destination.Config) *salesforce.CRM {
	t.Helper()
	ts := httptest.NewServer(c)
	t.Cleanup(ts.Close)
	if cfg == nil {
		cfg = config("")
	}
	cfg.BaseURL = ts.URL
	if err := salesforce.Spec.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	return salesforce.NewCRM(cfg)
}

func TestWriteRequest(t *testing.T) {
	c := &capture{}
	crm := captureCRM(t, c, nil)
	id, err := crm.Write(context.Background(), record("li_Vx-9_aZ"))
	if err != nil || id != "00Q000000000001AAA" {
		t.Fatalf("Write = %q, %v", id, err)
	}

	tok := c.requests("/services/oauth2/token")
	if len(tok) != 1 || tok[0].method != http.MethodPost || tok[0].header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		t.Fatalf("token requests %+v", tok)
	}
	form, _ := url.ParseQuery(string(tok[0].body))
	if form.Get("grant_type") != "client_credentials" || form.Get("client_id") != clientID || form.Get("client_secret") != clientSecret {
		t.Errorf("token form %v", form)
	}

	up := c.requests("/services/data/")
	if len(up) != 1 {
		t.Fatalf("%d API requests, want 1", len(up))
	}
	r := up[0]
	if r.method != http.MethodPatch || r.path != "/services/data/"+salesforce.APIVersion+"/sobjects/Lead/LeadIntake_Ref__c/li_Vx-9_aZ" {
		t.Errorf("%s %s", r.method, r.path)
	}
	for name, want := range map[string]string{
		"Authorization": "Bearer 00Dtok!abc", "Content-Type": "application/json", "Accept": "application/json",
		"Sforce-Duplicate-Rule-Header": "allowSave=true",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"LastName": "Lovelace", "FirstName": "Ada Augusta", "Company": "Analytical Engines", "Email": "ada@example.com",
		"Phone": "+44 20 7946 0000", "Website": "https://ae.example", "Description": "We would like a demo.", "LeadSource": "referral",
	}
	if !equalJSON(body, want) {
		t.Errorf("body %v\nwant %v", body, want)
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestWriteBody(t *testing.T) {
	long := strings.Repeat("é", 300)
	mapping, err := destination.ParseMapping(map[string]string{
		"Title": "fields.role", "LeadIntake_Score__c": "score", "leadsource": "=Web", "OwnerId": "=005000000000001AAA",
		"Industry": "enrichment.industry",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(r *destination.Record)
		cfg  func(c *destination.Config)
		want map[string]any
	}{{
		name: "OneWordNameNoCompanyNoOptionalMembers",
		edit: func(r *destination.Record) {
			r.Lead = &lead.Lead{Email: "ada@example.com", Source: "website", Name: "Ada"}
		},
		want: map[string]any{"LastName": "Ada", "FirstName": nil, "Company": salesforce.NotProvided, "Email": "ada@example.com",
			"Phone": nil, "Website": nil, "Description": nil, "LeadSource": "website"},
	}, {
		name: "NoName",
		edit: func(r *destination.Record) { r.Lead = &lead.Lead{Email: "ada@example.com", Source: "ads"} },
		want: map[string]any{"LastName": salesforce.NotProvided, "FirstName": nil, "Company": salesforce.NotProvided, "Email": "ada@example.com",
			"Phone": nil, "Website": nil, "Description": nil, "LeadSource": "ads"},
	}, {
		name: "LongNamesAreCut",
		edit: func(r *destination.Record) {
			r.Lead = &lead.Lead{Email: "ada@example.com", Source: "ads", Name: long + " " + long, Company: long}
		},
		want: map[string]any{"LastName": long[:80*2], "FirstName": long[:40*2], "Company": long[:255*2], "Email": "ada@example.com",
			"Phone": nil, "Website": nil, "Description": nil, "LeadSource": "ads"},
	}, {
		name: "MapAndOwner",
		edit: func(r *destination.Record) {
			industry := "Engines"
			r.Enrichment = &destination.Enrichment{Industry: &industry}
			r.Owner = &destination.Owner{Name: "alice", CRMOwner: "005000000000002AAA"}
		},
		cfg: func(c *destination.Config) { c.Map = mapping },
		want: map[string]any{"LastName": "Lovelace", "FirstName": "Ada Augusta", "Company": "Analytical Engines", "Email": "ada@example.com",
			"Phone": "+44 20 7946 0000", "Website": "https://ae.example", "Description": "We would like a demo.",
			// A map's field replaces a standard one whatever its case; the
			// owner's id replaces the map's default owner.
			"leadsource": "Web", "Title": "CTO", "LeadIntake_Score__c": float64(85), "Industry": "Engines", "OwnerId": "005000000000002AAA"},
	}, {
		name: "MapDefaultOwnerWithoutAnOwner",
		cfg:  func(c *destination.Config) { c.Map = mapping },
		want: map[string]any{"LastName": "Lovelace", "FirstName": "Ada Augusta", "Company": "Analytical Engines", "Email": "ada@example.com",
			"Phone": "+44 20 7946 0000", "Website": "https://ae.example", "Description": "We would like a demo.",
			"leadsource": "Web", "Title": "CTO", "LeadIntake_Score__c": float64(85), "OwnerId": "005000000000001AAA"},
	}, {
		name: "OwnerWithoutCRMOwner",
		edit: func(r *destination.Record) { r.Owner = &destination.Owner{Name: "bob"} },
		want: map[string]any{"LastName": "Lovelace", "FirstName": "Ada Augusta", "Company": "Analytical Engines", "Email": "ada@example.com",
			"Phone": "+44 20 7946 0000", "Website": "https://ae.example", "Description": "We would like a demo.", "LeadSource": "referral"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{}
			cfg := config("")
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			crm := captureCRM(t, c, cfg)
			r := record("li_ref")
			if tc.edit != nil {
				tc.edit(r)
			}
			if _, err := crm.Write(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			json.Unmarshal(c.requests("/services/data/")[0].body, &body)
			if !equalJSON(body, tc.want) {
				t.Errorf("body %v\nwant %v", body, tc.want)
			}
			for k := range body {
				if strings.EqualFold(k, "Id") || strings.EqualFold(k, "LeadIntake_Ref__c") {
					t.Errorf("body carries %s", k)
				}
			}
		})
	}
}

func TestPathsAreEscaped(t *testing.T) {
	c := &capture{answer: func(r *http.Request) (int, http.Header, string) {
		if r.Method == http.MethodGet {
			return http.StatusNotFound, nil, `[{"errorCode":"NOT_FOUND","message":"The requested resource does not exist"}]`
		}
		return http.StatusCreated, nil, `{"id":"00Q1","success":true,"errors":[],"created":true}`
	}}
	crm := captureCRM(t, c, config("", "ref_field", "ns__Lead_Ref__c"))
	r := record("li_a/b c.inc?x")
	if _, err := crm.Write(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, _, err := crm.Lookup(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	api := c.requests("/services/data/")
	want := "/services/data/" + salesforce.APIVersion + "/sobjects/Lead/ns__Lead_Ref__c/li_a%2Fb%20c.inc%3Fx"
	if api[0].rawPath != want || api[1].rawPath != want || api[1].query != "fields=Id" {
		t.Errorf("paths %q, %q?%s; want %q", api[0].rawPath, api[1].rawPath, api[1].query, want)
	}
}

func TestAnswers(t *testing.T) {
	const pii = "ada@example.com"
	limit := func(n, m int) http.Header {
		return http.Header{"Sforce-Limit-Info": {fmt.Sprintf("api-usage=%d/%d", n, m)}}
	}
	errBody := func(code, msg string, fields ...string) string {
		b, _ := json.Marshal([]map[string]any{{"errorCode": code, "message": msg, "fields": fields}})
		return string(b)
	}
	for _, tc := range []struct {
		name      string
		status    int
		header    http.Header
		body      string
		class     destination.Class
		code      string
		uncertain bool
		holdAll   bool
		inError   string
	}{
		{name: "SeveralLeads", status: 300, body: `["/services/data/v68.0/sobjects/Lead/00Q1","/services/data/v68.0/sobjects/Lead/00Q2"]`, class: destination.Rejected, code: "MULTIPLE_CHOICES"},
		{name: "BlockedDuplicate", status: 400, body: `[{"duplicateResult":{"allowSave":false},"errorCode":"DUPLICATES_DETECTED","message":"duplicate of ` + pii + `"}]`, class: destination.Rejected, code: "DUPLICATES_DETECTED"},
		{name: "DuplicateValueOfAnotherField", status: 400, body: errBody("DUPLICATE_VALUE", "duplicate value found: Email_Unique__c duplicates value on record with id: 00Q1"), class: destination.Rejected, code: "DUPLICATE_VALUE"},
		{name: "DuplicateValueOfTheReference", status: 400, body: errBody("DUPLICATE_VALUE", "duplicate value found: LeadIntake_Ref__c duplicates value on record with id: 00Q1"), class: destination.Transient, code: "DUPLICATE_VALUE"},
		{name: "DuplicateValueOfTheReferenceByFields", status: 400, body: errBody("DUPLICATE_VALUE", "duplicate", "leadintake_ref__c"), class: destination.Transient, code: "DUPLICATE_VALUE"},
		{name: "RequiredFieldMissing", status: 400, body: errBody("REQUIRED_FIELD_MISSING", "Required fields are missing: [LastName]", "LastName"), class: destination.Rejected, code: "REQUIRED_FIELD_MISSING", inError: "fields LastName"},
		{name: "ValidationRule", status: 400, body: errBody("FIELD_CUSTOM_VALIDATION_EXCEPTION", "Phone of "+pii+" must be local", "Phone"), class: destination.Rejected, code: "FIELD_CUSTOM_VALIDATION_EXCEPTION"},
		{name: "InvalidField", status: 400, body: errBody("INVALID_FIELD", "No such column 'Foo__c' on sobject of type Lead"), class: destination.Rejected, code: "INVALID_FIELD"},
		{name: "ConvertedLead", status: 400, body: errBody("CANNOT_UPDATE_CONVERTED_LEAD", "cannot reference converted lead"), class: destination.Rejected, code: "CANNOT_UPDATE_CONVERTED_LEAD"},
		{name: "OtherBadRequest", status: 400, body: errBody("INVALID_EMAIL_ADDRESS", "Email: invalid email address: "+pii, "Email"), class: destination.Rejected, code: "INVALID_EMAIL_ADDRESS"},
		{name: "KnownCodeAfterAnother", status: 400, body: `[{"errorCode":"SOMETHING_ELSE","message":"x"},{"errorCode":"UNABLE_TO_LOCK_ROW","message":"y"}]`, class: destination.Transient, code: "UNABLE_TO_LOCK_ROW"},
		{name: "RowLocked", status: 400, body: errBody("UNABLE_TO_LOCK_ROW", "unable to obtain exclusive access to this record"), class: destination.Transient, code: "UNABLE_TO_LOCK_ROW"},
		{name: "RequestLimit", status: 403, header: limit(100, 100000), body: errBody("REQUEST_LIMIT_EXCEEDED", "ConcurrentPerOrgLongTxn Limit exceeded."), class: destination.Transient, code: "REQUEST_LIMIT_EXCEEDED", holdAll: true},
		{name: "ForbiddenWhileAllocationSpent", status: 403, header: limit(100001, 100000), body: `[]`, class: destination.Transient, holdAll: true},
		{name: "ForbiddenPermission", status: 403, header: limit(5, 100000), body: errBody("INSUFFICIENT_ACCESS", "insufficient access"), class: destination.Unauthorized, code: "INSUFFICIENT_ACCESS"},
		{name: "APIDisabled", status: 403, body: errBody("API_DISABLED_FOR_ORG", "API is not enabled for this Organization or Partner"), class: destination.Unauthorized, code: "API_DISABLED_FOR_ORG"},
		{name: "NotFound", status: 404, body: errBody("NOT_FOUND", "The requested resource does not exist"), class: destination.Unauthorized, code: "NOT_FOUND"},
		{name: "ServerError", status: 500, body: errBody("UNKNOWN_EXCEPTION", "An unexpected error occurred"), class: destination.Transient, code: "UNKNOWN_EXCEPTION", uncertain: true},
		{name: "Unavailable", status: 503, header: limit(7, 100000), body: `<html>down</html>`, class: destination.Transient, uncertain: true},
		{name: "UnavailableWhileAllocationSpent", status: 503, header: limit(100000, 100000), body: ``, class: destination.Transient, uncertain: true, holdAll: true},
		{name: "SuccessWithoutID", status: 200, body: `{"success":true,"errors":[],"created":false}`, class: destination.Transient, uncertain: true},
		{name: "SuccessUnreadable", status: 201, body: `{"id":`, class: destination.Transient, uncertain: true},
		{name: "UnknownRedirect", status: 302, body: ``, class: destination.Transient, uncertain: true},
		{name: "GarbageCodeIsNotShown", status: 400, body: errBody("lower case "+pii, "x"), class: destination.Rejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{answer: func(*http.Request) (int, http.Header, string) { return tc.status, tc.header, tc.body }}
			crm := captureCRM(t, c, nil)
			_, err := crm.Write(context.Background(), record("li_answers"))
			e, ok := destination.AsError(err)
			if !ok {
				t.Fatalf("error %v is not a *destination.Error", err)
			}
			if e.Class != tc.class || e.Code != tc.code || e.Uncertain != tc.uncertain || e.HoldAll != tc.holdAll {
				t.Errorf("%v: class %s code %q uncertain %v hold %v; want %s %q %v %v", err, e.Class, e.Code, e.Uncertain, e.HoldAll,
					tc.class, tc.code, tc.uncertain, tc.holdAll)
			}
			if tc.holdAll && e.RetryAfter != salesforce.LimitHold {
				t.Errorf("hold for %v, want %v", e.RetryAfter, salesforce.LimitHold)
			}
			if !tc.holdAll && e.RetryAfter != 0 {
				t.Errorf("retry after %v, want none", e.RetryAfter)
			}
			if e.Status != tc.status {
				t.Errorf("status %d, want %d", e.Status, tc.status)
			}
			if strings.Contains(err.Error(), pii) || strings.Contains(err.Error(), "duplicates value") {
				t.Errorf("error %q shows the vendor's message", err)
			}
			if tc.inError != "" && !strings.Contains(err.Error(), tc.inError) {
				t.Errorf("error %q does not say %q", err, tc.inError)
			}
			if n := len(c.requests("/services/data/")); n != 1 {
				t.Errorf("%d calls, want 1 (the kind does not retry by itself)", n)
			}
		})
	}
}

func TestTokenAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		class  destination.Class
		code   string
	}{
		{"InvalidClient", 400, `{"error":"invalid_client","error_description":"invalid client credentials"}`, destination.Unauthorized, "invalid_client"},
		{"InvalidClientID", 400, `{"error":"invalid_client_id","error_description":"client identifier invalid"}`, destination.Unauthorized, "invalid_client_id"},
		{"FlowOff", 400, `{"error":"invalid_grant","error_description":"no client credentials user enabled"}`, destination.Unauthorized, "invalid_grant"},
		{"GrantType", 400, `{"error":"unsupported_grant_type","error_description":"grant type not supported"}`, destination.Unauthorized, "unsupported_grant_type"},
		{"Unauthorized401", 401, `{"error":"invalid_client","error_description":"x"}`, destination.Unauthorized, "invalid_client"},
		{"RetryYourRequest", 400, `{"error":"unknown_error","error_description":"retry your request"}`, destination.Transient, "unknown_error"},
		{"TooMany", 429, ``, destination.Transient, ""},
		{"Unavailable", 503, `<html/>`, destination.Transient, ""},
		{"NoToken", 200, `{"token_type":"Bearer"}`, destination.Transient, ""},
		{"GarbageErrorIsNotShown", 400, `{"error":"Secret: ` + clientSecret + `"}`, destination.Unauthorized, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{tokenAns: func() (int, string) { return tc.status, tc.body }}
			crm := captureCRM(t, c, nil)
			_, err := crm.Write(context.Background(), record("li_token"))
			e, ok := destination.AsError(err)
			if !ok || e.Class != tc.class || e.Code != tc.code || e.Uncertain || e.Op != "crm token" {
				t.Fatalf("error %v (%+v); want %s %q, certain, of crm token", err, e, tc.class, tc.code)
			}
			if strings.Contains(err.Error(), clientSecret) {
				t.Errorf("error %q shows the secret", err)
			}
			if n := len(c.requests("/services/data/")); n != 0 {
				t.Errorf("%d API calls without a token", n)
			}
		})
	}
}

// burst writes n leads at once with crm and returns their errors and the
// token calls their delivery logs recorded.
func burst(crm destination.CRM, n int) ([]error, int) {
	errs := make([]error, n)
	var tokenCalls atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
				if o.Step == "crm_token" {
					tokenCalls.Add(1)
				}
			})
			<-start
			_, errs[i] = crm.Write(ctx, record(fmt.Sprintf("li_burst_%02d", i)))
		})
	}
	close(start)
	wg.Wait()
	return errs, int(tokenCalls.Load())
}

func TestOneTokenForConcurrentWrites(t *testing.T) {
	crm, f := newCRM(t, nil, nil)
	// A slow token endpoint: every write of the burst asks while the
	// fetch runs.
	f.Script(salesforcefake.TargetToken, standin.Fault{Delay: 100 * time.Millisecond})
	errs, logged := burst(crm, 50)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if logged != 1 {
		t.Errorf("%d delivery logs show the token call, want the one lead's that made it", logged)
	}
	st := f.State()
	if st.TokensIssued != 1 || st.Requests[salesforcefake.TargetToken] != 1 {
		t.Errorf("%d tokens issued (%d token requests) for 50 concurrent writes, want 1", st.TokensIssued, st.Requests[salesforcefake.TargetToken])
	}
	if st.Records != 50 {
		t.Errorf("%d records, want 50", st.Records)
	}
	// Later writes reuse it too.
	for i := range 3 {
		if _, err := crm.Write(context.Background(), record(fmt.Sprintf("li_later_%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.State().TokensIssued; n != 1 {
		t.Errorf("%d tokens after more writes, want 1", n)
	}
}

func TestOneNewTokenWhenTheSessionExpiresMidBurst(t *testing.T) {
	crm, f := newCRM(t, nil, nil)
	f.ExpireTokensAfter(10)
	// The new token is slow to come: the 401s of the burst meet the
	// renewal while it runs.
	f.Script(salesforcefake.TargetToken, standin.Fault{}, standin.Fault{Delay: 100 * time.Millisecond})
	errs, logged := burst(crm, 50)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if logged != 2 {
		t.Errorf("%d token calls in the delivery logs, want 2", logged)
	}
	st := f.State()
	if st.TokensIssued != 2 {
		t.Errorf("%d tokens issued, want 2: one, and one more after the 401s", st.TokensIssued)
	}
	if st.Records != 50 {
		t.Errorf("%d records, want 50", st.Records)
	}
	if got := st.Requests[salesforcefake.TargetUpsert]; got <= 50 || got > 90 {
		t.Errorf("%d upserts, want 50 and one more for each 401 (at most 40)", got)
	}

	// Expired again, between two writes: one more token, the write goes
	// through.
	f.ExpireTokens()
	if _, err := crm.Write(context.Background(), record("li_after")); err != nil {
		t.Fatal(err)
	}
	if n := f.State().TokensIssued; n != 3 {
		t.Errorf("%d tokens, want 3", n)
	}
}

func TestConcurrentRefusalsFetchOnce(t *testing.T) {
	// Every lead's first call meets refused credentials at the token
	// endpoint: they share that one refusal too.
	var tokenCalls atomic.Int32
	release := make(chan struct{})
	c := &capture{tokenAns: func() (int, string) {
		tokenCalls.Add(1)
		<-release
		return 400, `{"error":"invalid_client","error_description":"invalid client credentials"}`
	}}
	crm := captureCRM(t, c, nil)
	done := make(chan []error)
	go func() {
		errs, _ := burst(crm, 20)
		done <- errs
	}()
	time.Sleep(200 * time.Millisecond) // let the burst reach the fetch
	close(release)
	for i, err := range <-done {
		if destination.Classify(err) != destination.Unauthorized {
			t.Errorf("write %d: %v, want unauthorized", i, err)
		}
	}
	if n := tokenCalls.Load(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

func TestALeadThatGivesUpLeavesTheFetchToTheOthers(t *testing.T) {
	crm, f := newCRM(t, nil, nil)
	f.Script(salesforcefake.TargetToken, standin.Fault{Delay: 300 * time.Millisecond})
	var leaderLogged atomic.Int32
	ctx, cancel := context.WithTimeout(destination.WithObserver(context.Background(), func(destination.Observation) {
		leaderLogged.Add(1)
	}), 50*time.Millisecond)
	defer cancel()
	leader := make(chan error)
	go func() {
		_, err := crm.Write(ctx, record("li_leader"))
		leader <- err
	}()
	time.Sleep(20 * time.Millisecond) // the leader starts the fetch
	if _, err := crm.Write(context.Background(), record("li_waiter")); err != nil {
		t.Errorf("the waiter: %v", err)
	}
	if err := <-leader; destination.Classify(err) != destination.Transient {
		t.Errorf("the leader that gave up: %v, want transient", err)
	}
	if st := f.State(); st.TokensIssued != 1 || st.Records != 1 {
		t.Errorf("%d tokens and %d records, want 1 and 1", st.TokensIssued, st.Records)
	}
	if n := leaderLogged.Load(); n != 0 {
		t.Errorf("the lead that gave up recorded %d calls after it left", n)
	}
}

func TestA401AfterAFreshTokenIsRefusedCredentials(t *testing.T) {
	c := &capture{answer: func(*http.Request) (int, http.Header, string) {
		return 401, nil, `[{"message":"Session expired or invalid","errorCode":"INVALID_SESSION_ID"}]`
	}}
	crm := captureCRM(t, c, nil)
	_, err := crm.Write(context.Background(), record("li_401"))
	e, ok := destination.AsError(err)
	if !ok || e.Class != destination.Unauthorized || e.Code != "INVALID_SESSION_ID" {
		t.Fatalf("error %v, want unauthorized INVALID_SESSION_ID", err)
	}
	if tok, api := len(c.requests("/services/oauth2/")), len(c.requests("/services/data/")); tok != 2 || api != 2 {
		t.Errorf("%d token requests and %d calls, want 2 and 2: one new token, the call again, once", tok, api)
	}
	auth := c.requests("/services/data/")
	if auth[0].header.Get("Authorization") == "" || auth[1].header.Get("Authorization") == "" {
		t.Error("a call without a token")
	}
}

func TestRotatedSecret(t *testing.T) {
	crm, f := newCRM(t, nil, nil)
	if _, err := crm.Write(context.Background(), record("li_before")); err != nil {
		t.Fatal(err)
	}
	// The secret rotates: the session is revoked and the old secret
	// refused.
	f.SetRefuseCredentials(true)
	_, err := crm.Write(context.Background(), record("li_during"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Unauthorized || e.Code != "invalid_client" {
		t.Fatalf("error %v, want unauthorized invalid_client", err)
	}
	f.SetRefuseCredentials(false)
	if _, err := crm.Write(context.Background(), record("li_after")); err != nil {
		t.Fatal(err)
	}
	if st := f.State(); st.Records != 2 || st.TokensIssued != 2 {
		t.Errorf("%d records and %d tokens, want 2 and 2", st.Records, st.TokensIssued)
	}
}

func TestUpdateWithoutABodyReadsTheID(t *testing.T) {
	crm, f := newCRM(t, &salesforcefake.Options{NoContentOnUpdate: true}, nil)
	var mu sync.Mutex
	var steps []string
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, o.Step+" "+o.Outcome)
	})
	r := record("li_nocontent")
	first, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	again, err := crm.Write(ctx, r)
	if err != nil || again != first {
		t.Fatalf("written again as %q, %v; first %q", again, err, first)
	}
	want := []string{"crm_token 200", "crm 201", "crm 204", "crm_lookup 200"}
	if !slices.Equal(steps, want) {
		t.Errorf("delivery log %v, want %v", steps, want)
	}
	if f.Count() != 1 {
		t.Errorf("%d records, want 1", f.Count())
	}
}

func TestLookup(t *testing.T) {
	ctx := context.Background()
	crm, f := newCRM(t, &salesforcefake.Options{NotUnique: true}, nil)
	if _, found, err := crm.Lookup(ctx, record("li_none")); found || err != nil {
		t.Errorf("unknown reference: found %v, %v", found, err)
	}
	id, err := crm.Write(ctx, record("li_one"))
	if err != nil {
		t.Fatal(err)
	}
	if got, found, err := crm.Lookup(ctx, record("li_one")); !found || err != nil || got != id {
		t.Errorf("Lookup = %q, %v, %v; want %q", got, found, err, id)
	}
	for range 2 {
		if _, err := f.Seed(map[string]any{"LastName": "X", "Company": "Y", "LeadIntake_Ref__c": "li_two"}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = crm.Lookup(ctx, record("li_two"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Rejected || e.Code != "MULTIPLE_CHOICES" {
		t.Errorf("two Leads under one reference: %v, want rejected MULTIPLE_CHOICES", err)
	}
	_, err = crm.Write(ctx, record("li_two"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Rejected || e.Code != "MULTIPLE_CHOICES" {
		t.Errorf("upsert under two Leads: %v, want rejected MULTIPLE_CHOICES", err)
	}
}

func TestDuplicateRules(t *testing.T) {
	ctx := context.Background()
	crm, f := newCRM(t, &salesforcefake.Options{DuplicateRule: salesforcefake.DuplicatesAlert}, nil)
	if _, err := crm.Write(ctx, record("li_first")); err != nil {
		t.Fatal(err)
	}
	// Alert rules let the kind's Leads through: allowSave.
	if _, err := crm.Write(ctx, record("li_second")); err != nil {
		t.Fatalf("an Alert rule refused: %v", err)
	}
	f.SetDuplicateRule(salesforcefake.DuplicatesBlock)
	_, err := crm.Write(ctx, record("li_third"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Rejected || e.Code != "DUPLICATES_DETECTED" {
		t.Errorf("a Block rule: %v, want rejected DUPLICATES_DETECTED", err)
	}
	// The rule is on inserts: an existing Lead is still updated.
	if _, err := crm.Write(ctx, record("li_first")); err != nil {
		t.Errorf("update under a Block rule: %v", err)
	}
	if n := f.Count(); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

func TestConvertedLead(t *testing.T) {
	ctx := context.Background()
	crm, f := newCRM(t, nil, nil)
	id, err := crm.Write(ctx, record("li_converted"))
	if err != nil {
		t.Fatal(err)
	}
	f.Convert(id)
	_, err = crm.Write(ctx, record("li_converted"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Rejected || e.Code != "CANNOT_UPDATE_CONVERTED_LEAD" {
		t.Errorf("%v, want rejected CANNOT_UPDATE_CONVERTED_LEAD", err)
	}
}

func TestMappedFieldsReachTheLead(t *testing.T) {
	ctx := context.Background()
	m, err := destination.ParseMapping(map[string]string{"LeadIntake_Score__c": "score", "Industry": "enrichment.industry", "Title": "fields.role"})
	if err != nil {
		t.Fatal(err)
	}
	c := config("")
	c.Map = m
	crm, f := newCRM(t, &salesforcefake.Options{CustomFields: []string{"LeadIntake_Score__c"}}, c)
	r := record("li_mapped")
	industry := "Engines"
	r.Enrichment = &destination.Enrichment{Industry: &industry}
	r.Owner = &destination.Owner{Name: "alice", CRMOwner: "005000000000002AAA"}
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.Lead(id)
	for k, want := range map[string]any{"LeadIntake_Score__c": float64(85), "Industry": "Engines", "Title": "CTO",
		"OwnerId": "005000000000002AAA", "LeadIntake_Ref__c": "li_mapped", "LastName": "Lovelace"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}

	// A map naming a field Lead does not have is refused by Salesforce.
	bad, _ := destination.ParseMapping(map[string]string{"Nope__c": "score"})
	c2 := config("")
	c2.Map = bad
	crm2, _ := newCRM(t, nil, c2)
	_, err = crm2.Write(ctx, record("li_badmap"))
	if e, ok := destination.AsError(err); !ok || e.Class != destination.Rejected || e.Code != "INVALID_FIELD" {
		t.Errorf("%v, want rejected INVALID_FIELD", err)
	}
}

func TestTheOwnerChosenStays(t *testing.T) {
	ctx := context.Background()
	const rule, alice = "005000000000009AAA", "005000000000002AAA"
	crm, f := newCRM(t, &salesforcefake.Options{AssignmentRuleOwner: rule}, nil)
	r := record("li_owned")
	r.Owner = &destination.Owner{Name: "alice", CRMOwner: alice}
	for range 2 { // created, then updated: the rule runs on both
		id, err := crm.Write(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := f.Lead(id); got["OwnerId"] != alice {
			t.Errorf("owner %v, want the lead's", got["OwnerId"])
		}
	}
	// Without an owner, the org's assignment rule assigns the Lead.
	id, err := crm.Write(ctx, record("li_unowned"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Lead(id); got["OwnerId"] != rule {
		t.Errorf("owner %v, want the assignment rule's", got["OwnerId"])
	}
}

func TestAutoAssignHeader(t *testing.T) {
	m, _ := destination.ParseMapping(map[string]string{"ownerid": "=005000000000001AAA"})
	for _, tc := range []struct {
		name  string
		owner *destination.Owner
		m     destination.Mapping
		want  string
	}{
		{"NoOwner", nil, nil, ""},
		{"OwnerWithoutCRMOwner", &destination.Owner{Name: "bob"}, nil, ""},
		{"Owner", &destination.Owner{Name: "alice", CRMOwner: "005000000000002AAA"}, nil, "FALSE"},
		{"MapOwner", nil, m, "FALSE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{}
			cfg := config("")
			cfg.Map = tc.m
			crm := captureCRM(t, c, cfg)
			r := record("li_assign")
			r.Owner = tc.owner
			if _, err := crm.Write(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got := c.requests("/services/data/")[0].header.Get("Sforce-Auto-Assign"); got != tc.want {
				t.Errorf("Sforce-Auto-Assign %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAmendmentUpdatesTheLeadInPlace(t *testing.T) {
	ctx := context.Background()
	crm, f := newCRM(t, nil, nil)
	r := record("li_amend")
	id, err := crm.Write(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	amended := *r
	l := *r.Lead
	l.Phone, l.Name = "", "Ada King"
	amended.Lead, amended.Amendment = &l, 1
	if got, err := crm.Write(ctx, &amended); err != nil || got != id {
		t.Fatalf("amendment written as %q, %v; want %q", got, err, id)
	}
	fields, _ := f.Lead(id)
	if _, has := fields["Phone"]; has || fields["LastName"] != "King" || fields["FirstName"] != "Ada" {
		t.Errorf("amended Lead %v: want the phone cleared and the new name", fields)
	}
}

func TestRequestLimitFromTheOrg(t *testing.T) {
	crm, f := newCRM(t, nil, nil)
	f.SetAPIUsage(1000, 1000)
	_, err := crm.Write(context.Background(), record("li_limit"))
	e, ok := destination.AsError(err)
	if !ok || e.Class != destination.Transient || !e.HoldAll || e.RetryAfter != salesforce.LimitHold || e.Code != "REQUEST_LIMIT_EXCEEDED" {
		t.Fatalf("%v (%+v), want transient REQUEST_LIMIT_EXCEEDED holding all for %v", err, e, salesforce.LimitHold)
	}
}

func TestValidate(t *testing.T) {
	m := func(kv ...string) destination.Mapping {
		in := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			in[kv[i]] = kv[i+1]
		}
		out, err := destination.ParseMapping(in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(c *destination.Config)
		want string // "" for valid
	}{
		{"Valid", func(*destination.Config) {}, ""},
		{"ValidWithSlash", func(c *destination.Config) { c.Values["instance_url"] = "https://acme.my.salesforce.com/" }, ""},
		{"NoInstanceURL", func(c *destination.Config) { delete(c.Values, "instance_url") }, "instance_url"},
		{"HTTPInstanceURL", func(c *destination.Config) { c.Values["instance_url"] = "http://acme.my.salesforce.com" }, "instance_url"},
		{"InstanceURLWithPath", func(c *destination.Config) { c.Values["instance_url"] = "https://acme.my.salesforce.com/services" }, "instance_url"},
		{"InstanceURLWithUser", func(c *destination.Config) {
			c.Values["instance_url"] = "https://u:" + clientSecret + "@acme.my.salesforce.com"
		}, "instance_url"},
		{"NoClientID", func(c *destination.Config) { delete(c.Values, "client_id") }, "client_id"},
		{"NoClientSecret", func(c *destination.Config) { c.Values["client_secret"] = "" }, "client_secret"},
		{"RefFieldNotCustom", func(c *destination.Config) { c.Values["ref_field"] = "Email" }, "ref_field"},
		{"RefFieldBadName", func(c *destination.Config) { c.Values["ref_field"] = "Bad-Field__c" }, "ref_field"},
		{"NamespacedRefField", func(c *destination.Config) { c.Values["ref_field"] = "ns__Ref__c" }, ""},
		{"BadBaseURL", func(c *destination.Config) { c.BaseURL = "https://proxy.example/?token=" + clientSecret }, "base_url"},
		{"MapNotAFieldName", func(c *destination.Config) { c.Map = m("jobs.title", "fields.role") }, "map: jobs.title"},
		{"MapID", func(c *destination.Config) { c.Map = m("ID", "lead_id") }, "map: Id"},
		{"MapRefField", func(c *destination.Config) { c.Map = m("leadintake_ref__c", "external_ref") }, "map: leadintake_ref__c"},
		{"MapSameFieldTwice", func(c *destination.Config) { c.Map = m("Title", "fields.role", "TITLE", "fields.job") }, "one Salesforce field"},
		{"MapStandardField", func(c *destination.Config) { c.Map = m("LeadSource", "=Web", "OwnerId", "=005000000000001AAA") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config("")
			tc.edit(c)
			err := salesforce.Spec.Validate(c)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
			if err != nil && (strings.Contains(err.Error(), clientSecret) || strings.Contains(err.Error(), "\n")) {
				t.Errorf("error %q shows a secret or is not one line", err)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	want := map[string][2]bool{"instance_url": {true, false}, "client_id": {true, false}, "client_secret": {true, true}, "ref_field": {false, false}}
	for _, m := range salesforce.Spec.Members {
		if w, ok := want[m.Name]; !ok || m.Required != w[0] || m.Secret != w[1] {
			t.Errorf("member %+v", m)
		}
		delete(want, m.Name)
	}
	if len(want) != 0 {
		t.Errorf("members missing: %v", want)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts salesforcefake.Options
		cfg  *destination.Config
		want string // "" for ok
	}{
		{"OK", salesforcefake.Options{}, nil, ""},
		{"OtherRefFieldCase", salesforcefake.Options{RefField: "Web_Ref__c"}, config("", "ref_field", "web_ref__c"), ""},
		{"Missing", salesforcefake.Options{RefFieldMissing: true}, nil, "ref_field LeadIntake_Ref__c is not a field of Lead"},
		{"NotExternalID", salesforcefake.Options{NotExternalID: true}, nil, "ref_field LeadIntake_Ref__c is not marked External ID"},
		{"NotUnique", salesforcefake.Options{NotUnique: true}, nil, "ref_field LeadIntake_Ref__c is not marked Unique"},
		{"TooShort", salesforcefake.Options{RefFieldLength: 40}, nil, "holds 40 characters"},
		{"OtherField", salesforcefake.Options{}, config("", "ref_field", "Other_Ref__c"), "ref_field Other_Ref__c is not a field of Lead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crm, f := newCRM(t, &tc.opts, tc.cfg)
			err := crm.Check(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("check failed: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("check: %v, want %q", err, tc.want)
			}
			if st := f.State(); st.Records != 0 || st.Requests[salesforcefake.TargetDescribe] != 1 || st.TokensIssued != 1 {
				t.Errorf("check made %+v, want a token and one describe", st)
			}
		})
	}
	t.Run("RefusedCredentials", func(t *testing.T) {
		crm, f := newCRM(t, nil, nil)
		f.SetRefuseCredentials(true)
		err := crm.Check(context.Background())
		if destination.Classify(err) != destination.Unauthorized || strings.Contains(err.Error(), clientSecret) {
			t.Errorf("check: %v, want refused credentials without the secret", err)
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		crm := salesforce.NewCRM(config("http://127.0.0.1:1"))
		if err := crm.Check(context.Background()); err == nil {
			t.Error("check of nothing passed")
		}
	})
}

func TestCapabilities(t *testing.T) {
	crm := salesforce.NewCRM(config(""))
	if got := crm.Capabilities(); got != (destination.CRMCapabilities{Upsert: true, ConsistentLookup: true}) {
		t.Errorf("capabilities %+v", got)
	}
	if _, err := crm.Update(context.Background(), "00Q1", record("li_x")); destination.Classify(err) != destination.Rejected {
		t.Errorf("Update: %v", err)
	}
}

func TestAPIUsage(t *testing.T) {
	for v, want := range map[string][3]int{
		"api-usage=10018/100000":                                 {10018, 100000, 1},
		"api-usage=110018/100000; api-bursts=1/750":              {110018, 100000, 1},
		"per-app-api-usage=17/250(appName=x); api-usage=25/5000": {25, 5000, 1},
		"":               {0, 0, 0},
		"api-usage=lots": {0, 0, 0},
	} {
		used, limit, ok := salesforce.APIUsage(http.Header{"Sforce-Limit-Info": {v}})
		if used != want[0] || limit != want[1] || ok != (want[2] == 1) {
			t.Errorf("%q: %d/%d %v", v, used, limit, ok)
		}
	}
}
