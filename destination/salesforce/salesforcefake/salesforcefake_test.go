package salesforcefake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/destination/salesforce/salesforcefake"
	"github.com/leadintake/leadintake/internal/standin"
)

const leads = "/services/data/v68.0/sobjects/Lead"

type bundle struct {
	t  *testing.T
	f  *salesforcefake.Server
	ts *httptest.Server
}

func setup(t *testing.T, opts *salesforcefake.Options) *bundle {
	t.Helper()
	f := salesforcefake.New(opts)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return &bundle{t, f, ts}
}

type answer struct {
	status int
	header http.Header
	body   string
}

// code is the first errorCode of a Salesforce error body.
func (a answer) code() string {
	var errs []struct {
		ErrorCode string `json:"errorCode"`
	}
	json.Unmarshal([]byte(a.body), &errs)
	if len(errs) == 0 {
		return ""
	}
	return errs[0].ErrorCode
}

func (b *bundle) do(method, path, token, contentType, body string, header ...string) answer {
	b.t.Helper()
	req, err := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(raw)}
}

func (b *bundle) tokenAnswer(form url.Values) answer {
	b.t.Helper()
	return b.do(http.MethodPost, "/services/oauth2/token", "", "application/x-www-form-urlencoded", form.Encode())
}

func goodForm() url.Values {
	return url.Values{"grant_type": {"client_credentials"}, "client_id": {salesforcefake.DefaultClientID},
		"client_secret": {salesforcefake.DefaultClientSecret}}
}

func (b *bundle) token() string {
	b.t.Helper()
	a := b.tokenAnswer(goodForm())
	var tok struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		InstanceURL string `json:"instance_url"`
	}
	if err := json.Unmarshal([]byte(a.body), &tok); err != nil || a.status != 200 || tok.AccessToken == "" || tok.TokenType != "Bearer" {
		b.t.Fatalf("token: %d %s", a.status, a.body)
	}
	return tok.AccessToken
}

func (b *bundle) upsert(token, ref, body string, header ...string) answer {
	b.t.Helper()
	return b.do(http.MethodPatch, leads+"/LeadIntake_Ref__c/"+ref, token, "application/json", body, header...)
}

const okLead = `{"LastName":"Lovelace","Company":"Analytical Engines","Email":"ada@example.com"}`

func TestTokenEndpoint(t *testing.T) {
	b := setup(t, nil)
	form := func(edit func(v url.Values)) url.Values {
		v := goodForm()
		edit(v)
		return v
	}
	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"WrongSecret", form(func(v url.Values) { v.Set("client_secret", "nope") }), "invalid_client"},
		{"NoSecret", form(func(v url.Values) { v.Del("client_secret") }), "invalid_client"},
		{"WrongClient", form(func(v url.Values) { v.Set("client_id", "other") }), "invalid_client_id"},
		{"PasswordGrant", form(func(v url.Values) { v.Set("grant_type", "password") }), "unsupported_grant_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := b.tokenAnswer(tc.form)
			var e struct{ Error string }
			json.Unmarshal([]byte(a.body), &e)
			if a.status != 400 || e.Error != tc.want {
				t.Errorf("%d %s, want 400 %s", a.status, a.body, tc.want)
			}
		})
	}
	if a := b.do(http.MethodPost, "/services/oauth2/token", "", "application/json", `{"grant_type":"client_credentials"}`); a.status != 400 {
		t.Errorf("a JSON token request: %d", a.status)
	}
	b.token()
	if st := b.f.State(); st.TokensIssued != 1 || st.Requests[salesforcefake.TargetToken] != 6 {
		t.Errorf("state %+v", st)
	}

	// Refused credentials: the right secret is refused and sessions are
	// revoked, until restored.
	tok := b.token()
	b.f.SetRefuseCredentials(true)
	if a := b.tokenAnswer(goodForm()); !strings.Contains(a.body, `"invalid_client"`) {
		t.Errorf("refused: %d %s", a.status, a.body)
	}
	if a := b.upsert(tok, "li_x", okLead); a.status != 401 || a.code() != "INVALID_SESSION_ID" {
		t.Errorf("a session of before the refusal: %d %s", a.status, a.body)
	}
	b.f.SetRefuseCredentials(false)
	if a := b.upsert(b.token(), "li_x", okLead); a.status != 201 {
		t.Errorf("restored: %d %s", a.status, a.body)
	}
}

func TestSessions(t *testing.T) {
	b := setup(t, nil)
	for name, tok := range map[string]string{"NoToken": "", "UnknownToken": "00Dfake!token"} {
		a := b.upsert(tok, "li_x", okLead)
		if a.status != 401 || a.code() != "INVALID_SESSION_ID" {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
	}
	tok := b.token()
	b.f.ExpireTokensAfter(2)
	for i, want := range []int{201, 200, 401} {
		if a := b.upsert(tok, "li_exp", okLead); a.status != want {
			t.Errorf("call %d: %d %s, want %d", i, a.status, a.body, want)
		}
	}
	tok = b.token()
	if a := b.upsert(tok, "li_exp", okLead); a.status != 200 {
		t.Errorf("new session: %d", a.status)
	}
	b.f.ExpireTokens()
	if a := b.upsert(tok, "li_exp", okLead); a.status != 401 {
		t.Errorf("expired: %d", a.status)
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
}

func TestUpsert(t *testing.T) {
	b := setup(t, nil)
	tok := b.token()
	a := b.upsert(tok, "li_AbC", okLead)
	var res struct {
		ID      string `json:"id"`
		Success bool   `json:"success"`
		Created *bool  `json:"created"`
	}
	json.Unmarshal([]byte(a.body), &res)
	if a.status != 201 || !res.Success || res.Created == nil || !*res.Created || !strings.HasPrefix(res.ID, "00Q") || len(res.ID) != 18 {
		t.Fatalf("insert: %d %s", a.status, a.body)
	}
	if !strings.HasPrefix(a.header.Get("Sforce-Limit-Info"), "api-usage=1/") {
		t.Errorf("Sforce-Limit-Info %q", a.header.Get("Sforce-Limit-Info"))
	}
	// The external ID matches regardless of case, as Salesforce's unique
	// ones do by default.
	id := res.ID
	a = b.upsert(tok, "li_abc", `{"Phone":"+44 1","Email":null}`)
	json.Unmarshal([]byte(a.body), &res)
	if a.status != 200 || res.ID != id || res.Created == nil || *res.Created {
		t.Fatalf("update: %d %s", a.status, a.body)
	}
	got, _ := b.f.Lead(id)
	if got["Phone"] != "+44 1" || got["LastName"] != "Lovelace" || got["LeadIntake_Ref__c"] != "li_AbC" {
		t.Errorf("record %v", got)
	}
	if _, has := got["Email"]; has {
		t.Error("a null did not clear Email")
	}
	// Before v46.0, an update answers 204 without a body.
	a = b.do(http.MethodPatch, "/services/data/v45.0/sobjects/Lead/LeadIntake_Ref__c/li_abc", tok, "application/json", `{"Phone":"+44 2"}`)
	if a.status != 204 || a.body != "" {
		t.Errorf("old version update: %d %q", a.status, a.body)
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
}

func TestUpsertRefuses(t *testing.T) {
	b := setup(t, &salesforcefake.Options{CustomFields: []string{"Score__c"}})
	tok := b.token()
	long := strings.Repeat("x", 81)
	for _, tc := range []struct {
		name, path, contentType, body string
		status                        int
		code                          string
	}{
		{"NoLastName", "/LeadIntake_Ref__c/li_1", "", `{"Company":"AE"}`, 400, "REQUIRED_FIELD_MISSING"},
		{"BlankCompany", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":" "}`, 400, "REQUIRED_FIELD_MISSING"},
		{"RefInBody", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","leadintake_ref__c":"li_1"}`, 400, "INVALID_FIELD"},
		{"IDInBody", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","Id":"00Q1"}`, 400, "INVALID_FIELD"},
		{"UnknownField", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","Nope__c":1}`, 400, "INVALID_FIELD"},
		{"ReadOnlyField", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","Name":"x"}`, 400, "INVALID_FIELD_FOR_INSERT_UPDATE"},
		{"TooLong", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"` + long + `","Company":"C"}`, 400, "STRING_TOO_LONG"},
		{"BadEmail", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","Email":"ada.example.com"}`, 400, "INVALID_EMAIL_ADDRESS"},
		{"BadOwner", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","OwnerId":"9001"}`, 400, "MALFORMED_ID"},
		{"NumberAsString", "/LeadIntake_Ref__c/li_1", "", `{"LastName":"L","Company":"C","NumberOfEmployees":"many"}`, 400, "JSON_PARSER_ERROR"},
		{"Malformed", "/LeadIntake_Ref__c/li_1", "", `{"LastName":`, 400, "JSON_PARSER_ERROR"},
		{"NotAnObject", "/LeadIntake_Ref__c/li_1", "", `["LastName"]`, 400, "JSON_PARSER_ERROR"},
		{"TwoObjects", "/LeadIntake_Ref__c/li_1", "", okLead + okLead, 400, "JSON_PARSER_ERROR"},
		{"NotJSON", "/LeadIntake_Ref__c/li_1", "text/plain", okLead, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"OtherField", "/Email/li_1", "", okLead, 404, "NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			a := b.do(http.MethodPatch, leads+tc.path, tok, ct, tc.body)
			if a.status != tc.status || a.code() != tc.code {
				t.Errorf("%d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
		})
	}
	if a := b.do(http.MethodPatch, "/services/data/v68.0/sobjects/Contact/LeadIntake_Ref__c/li_1", tok, "application/json", okLead); a.status != 404 {
		t.Errorf("another object: %d", a.status)
	}
	if a := b.do(http.MethodPatch, "/services/data/68/sobjects/Lead/LeadIntake_Ref__c/li_1", tok, "application/json", okLead); a.status != 404 {
		t.Errorf("a bad version: %d", a.status)
	}
	// A custom field of the options takes any scalar.
	if a := b.upsert(tok, "li_ok", `{"LastName":"L","Company":"C","score__c":85,"NumberOfEmployees":12}`); a.status != 201 {
		t.Errorf("%d %s", a.status, a.body)
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}
}

func TestExternalIDField(t *testing.T) {
	for name, opts := range map[string]*salesforcefake.Options{
		"Missing":       {RefFieldMissing: true},
		"NotExternalID": {NotExternalID: true},
	} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, opts)
			a := b.upsert(b.token(), "li_1", okLead)
			if a.status != 404 || a.code() != "NOT_FOUND" || !strings.Contains(a.body, "external ID field") {
				t.Errorf("%d %s", a.status, a.body)
			}
		})
	}
}

func TestUniqueValue(t *testing.T) {
	b := setup(t, nil)
	tok := b.token()
	create := func(ref string) answer {
		return b.do(http.MethodPost, leads, tok, "application/json", `{"LastName":"L","Company":"C","LeadIntake_Ref__c":"`+ref+`"}`)
	}
	if a := create("li_Unique"); a.status != 201 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a := create("LI_UNIQUE"); a.status != 400 || a.code() != "DUPLICATE_VALUE" {
		t.Errorf("a second Lead under a Unique value: %d %s", a.status, a.body)
	}
	if _, err := b.f.Seed(map[string]any{"LastName": "L", "Company": "C", "LeadIntake_Ref__c": "li_unique"}); err == nil {
		t.Error("Seed made a second Lead under a Unique value")
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records, want 1", n)
	}

	// Case-sensitive, they are two values.
	cs := setup(t, &salesforcefake.Options{CaseSensitive: true})
	tok = cs.token()
	for _, ref := range []string{"li_Unique", "LI_UNIQUE"} {
		if a := cs.upsert(tok, ref, okLead); a.status != 201 {
			t.Errorf("%s: %d %s", ref, a.status, a.body)
		}
	}
}

func TestSeveralRecordsUnderOneValue(t *testing.T) {
	b := setup(t, &salesforcefake.Options{NotUnique: true})
	for range 2 {
		if _, err := b.f.Seed(map[string]any{"LastName": "L", "Company": "C", "LeadIntake_Ref__c": "li_two"}); err != nil {
			t.Fatal(err)
		}
	}
	tok := b.token()
	for _, a := range []answer{b.upsert(tok, "li_two", okLead), b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_two?fields=Id", tok, "", "")} {
		var urls []string
		if a.status != 300 || json.Unmarshal([]byte(a.body), &urls) != nil || len(urls) != 2 {
			t.Errorf("%d %s, want 300 and the two Leads", a.status, a.body)
		}
	}
	if n := b.f.Count(); n != 2 {
		t.Errorf("%d records, want 2: a 300 writes nothing", n)
	}
}

func TestLookupAndDescribe(t *testing.T) {
	b := setup(t, nil)
	tok := b.token()
	if a := b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_none?fields=Id", tok, "", ""); a.status != 404 || a.code() != "NOT_FOUND" {
		t.Errorf("none: %d %s", a.status, a.body)
	}
	b.upsert(tok, "li_one", okLead)
	a := b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_one?fields=Id", tok, "", "")
	var rec map[string]any
	json.Unmarshal([]byte(a.body), &rec)
	if a.status != 200 || rec["Id"] == nil || len(rec) != 2 {
		t.Errorf("found: %d %s, want attributes and Id only", a.status, a.body)
	}
	if a := b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_one?fields=Nope", tok, "", ""); a.status != 400 || a.code() != "INVALID_FIELD" {
		t.Errorf("unknown field: %d %s", a.status, a.body)
	}
	if a := b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_one", "", "", ""); a.status != 401 {
		t.Errorf("without a session: %d", a.status)
	}

	a = b.do(http.MethodGet, leads+"/describe", tok, "", "")
	var d struct {
		Name   string
		Fields []struct {
			Name       string
			ExternalID bool `json:"externalId"`
			Unique     bool
			Length     int
		}
	}
	if err := json.Unmarshal([]byte(a.body), &d); err != nil || a.status != 200 || d.Name != "Lead" {
		t.Fatalf("describe: %d %s", a.status, a.body)
	}
	found := false
	for _, f := range d.Fields {
		if f.Name == "LeadIntake_Ref__c" {
			found = f.ExternalID && f.Unique && f.Length == 64
		}
	}
	if !found {
		t.Error("describe: the ref field is not an External ID, Unique, of 64 characters")
	}
}

func TestDuplicateRule(t *testing.T) {
	b := setup(t, &salesforcefake.Options{DuplicateRule: salesforcefake.DuplicatesAlert})
	tok := b.token()
	if a := b.upsert(tok, "li_1", okLead); a.status != 201 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	second := strings.Replace(okLead, "ada@", "ADA@", 1)
	if a := b.upsert(tok, "li_2", second); a.status != 400 || a.code() != "DUPLICATES_DETECTED" || strings.Contains(a.body, "ada@") {
		t.Errorf("alert without allowSave: %d %s (no personal data in it)", a.status, a.body)
	}
	if a := b.upsert(tok, "li_2", second, "Sforce-Duplicate-Rule-Header", "allowSave=true; includeRecordDetails=false"); a.status != 201 {
		t.Errorf("alert with allowSave: %d %s", a.status, a.body)
	}
	b.f.SetDuplicateRule(salesforcefake.DuplicatesBlock)
	if a := b.upsert(tok, "li_3", second, "Sforce-Duplicate-Rule-Header", "allowSave=true"); a.status != 400 || a.code() != "DUPLICATES_DETECTED" {
		t.Errorf("block with allowSave: %d %s", a.status, a.body)
	}
	if a := b.upsert(tok, "li_1", okLead); a.status != 200 {
		t.Errorf("an update under a block rule: %d %s", a.status, a.body)
	}
	if n := b.f.Count(); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

func TestConvertedLead(t *testing.T) {
	b := setup(t, nil)
	tok := b.token()
	id, _ := b.f.Seed(map[string]any{"LastName": "L", "Company": "C", "LeadIntake_Ref__c": "li_c"})
	b.f.Convert(id)
	if a := b.upsert(tok, "li_c", okLead); a.status != 400 || a.code() != "CANNOT_UPDATE_CONVERTED_LEAD" {
		t.Errorf("%d %s", a.status, a.body)
	}
}

func TestAllocation(t *testing.T) {
	b := setup(t, &salesforcefake.Options{Allocation: 3})
	tok := b.token()
	for i, want := range []int{201, 200, 200, 403} {
		a := b.upsert(tok, "li_1", okLead)
		if a.status != want || (want == 403 && a.code() != "REQUEST_LIMIT_EXCEEDED") || a.header.Get("Retry-After") != "" {
			t.Errorf("call %d: %d %s, want %d", i, a.status, a.body, want)
		}
		if got := a.header.Get("Sforce-Limit-Info"); got != "api-usage="+string(rune('1'+i))+"/3" {
			t.Errorf("call %d: Sforce-Limit-Info %q", i, got)
		}
	}
	// Every REST answer carries it, a refused session's and a fault's too.
	b.f.Script(salesforcefake.TargetLookup, salesforcefake.ServerErrorFault())
	for _, a := range []answer{b.upsert("", "li_1", okLead), b.do(http.MethodGet, leads+"/LeadIntake_Ref__c/li_1", tok, "", "")} {
		if a.header.Get("Sforce-Limit-Info") == "" {
			t.Errorf("%d without Sforce-Limit-Info", a.status)
		}
	}
}

func TestFaults(t *testing.T) {
	b := setup(t, nil)
	tok := b.token()
	b.f.Script(salesforcefake.TargetUpsert, standin.Fault{DropAfterApply: true}, salesforcefake.RequestLimitFault(), salesforcefake.LockFault())
	req, _ := http.NewRequest(http.MethodPatch, b.ts.URL+leads+"/LeadIntake_Ref__c/li_1", strings.NewReader(okLead))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	if _, err := b.ts.Client().Do(req); err == nil {
		t.Error("a dropped answer arrived")
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records after apply-then-drop, want 1", n)
	}
	if a := b.upsert(tok, "li_2", okLead); a.status != 403 || a.code() != "REQUEST_LIMIT_EXCEEDED" {
		t.Errorf("%d %s", a.status, a.body)
	}
	if a := b.upsert(tok, "li_2", okLead); a.status != 400 || a.code() != "UNABLE_TO_LOCK_ROW" {
		t.Errorf("%d %s", a.status, a.body)
	}
	if n := b.f.Count(); n != 1 {
		t.Errorf("%d records, want 1: faults apply nothing", n)
	}
}

func TestControlAPI(t *testing.T) {
	b := setup(t, nil)
	post := func(path, body string) int {
		return b.do(http.MethodPost, "/_standin"+path, "", "application/json", body).status
	}
	tok := b.token()
	b.upsert(tok, "li_1", okLead)
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/credentials", `{"refuse":true}`, 204},
		{"/credentials", `{}`, 400},
		{"/credentials", `{"refuse":true,"extra":1}`, 400},
		{"/duplicate-rule", `{"mode":"block"}`, 204},
		{"/duplicate-rule", `{"mode":"sometimes"}`, 400},
		{"/limits", `{"used":5,"allocation":10}`, 204},
		{"/limits", `{"used":-1}`, 400},
		{"/tokens/expire", `{"after":0}`, 204},
		{"/script", `{"target":"upsert","faults":[{"status":503}]}`, 204},
		{"/script", `{"target":"nope","faults":[]}`, 400},
	} {
		if got := post(tc.path, tc.body); got != tc.want {
			t.Errorf("POST %s %s: %d, want %d", tc.path, tc.body, got, tc.want)
		}
	}
	a := b.do(http.MethodGet, "/_standin/state", "", "", "")
	var st salesforcefake.State
	if err := json.Unmarshal([]byte(a.body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Records != 1 || !st.RefusingCredentials || st.DuplicateRule != salesforcefake.DuplicatesBlock || st.Allocation != 10 ||
		st.APIUsage != 5 || st.TokensIssued != 1 || st.TokensValid != 0 || st.Requests[salesforcefake.TargetUpsert] != 1 {
		t.Errorf("state %+v", st)
	}
	if strings.Contains(a.body, "ada@") || strings.Contains(a.body, "Lovelace") {
		t.Errorf("state shows personal data: %s", a.body)
	}
	if got := post("/reset", ``); got != 204 {
		t.Errorf("reset: %d", got)
	}
	if st := b.f.State(); st.Records != 0 || st.RefusingCredentials || st.DuplicateRule != salesforcefake.DuplicatesOff || st.TokensIssued != 0 {
		t.Errorf("after reset %+v", st)
	}
	tok = b.token()
	if a := b.upsert(tok, "li_1", okLead); a.status != 201 {
		t.Errorf("after reset, the scripted fault is gone: %d", a.status)
	}
}

func TestAssignmentRule(t *testing.T) {
	const rule = "005000000000009AAA"
	b := setup(t, &salesforcefake.Options{AssignmentRuleOwner: rule})
	tok := b.token()
	owned := `{"LastName":"L","Company":"C","OwnerId":"005000000000002AAA"}`
	b.upsert(tok, "li_1", owned, "Sforce-Auto-Assign", "false")
	b.upsert(tok, "li_2", owned)
	id1, id2 := b.f.IDs("li_1")[0], b.f.IDs("li_2")[0]
	if l, _ := b.f.Lead(id1); l["OwnerId"] != "005000000000002AAA" {
		t.Errorf("with Sforce-Auto-Assign: false, owner %v", l["OwnerId"])
	}
	if l, _ := b.f.Lead(id2); l["OwnerId"] != rule {
		t.Errorf("without it, owner %v, want the rule's", l["OwnerId"])
	}
	// The rule runs on updates too.
	b.upsert(tok, "li_1", `{"Phone":"1"}`)
	if l, _ := b.f.Lead(id1); l["OwnerId"] != rule {
		t.Errorf("after an update, owner %v, want the rule's", l["OwnerId"])
	}
}
