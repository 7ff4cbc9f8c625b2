package hubspotfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
)

const token = "pat-na1-test"

type bundle struct {
	f   *hubspotfake.Server
	url string
}

func setup(t *testing.T, o *hubspotfake.Options) *bundle {
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
	return &bundle{f: f, url: ts.URL}
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends method path with body (JSON when not a string), authorized with
// auth ("" for none).
func (b *bundle) do(t *testing.T, method, path, auth string, body any) answer {
	t.Helper()
	var r io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		r = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, b.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

const bearer = "Bearer " + token

func upsertBody(inputs ...map[string]any) map[string]any {
	return map[string]any{"inputs": inputs}
}

func input(email, ref string, props map[string]string) map[string]any {
	return map[string]any{"idProperty": "email", "id": email, "objectWriteTraceId": ref, "properties": props}
}

const upsertPath = "/crm/objects/2026-09/contacts/batch/upsert"

// firstError is the code of a body's first error (of a batch's first
// error, for a 207).
func firstError(a answer) (category, code string) {
	errs, _ := a.body["errors"].([]any)
	if len(errs) == 0 {
		category, _ = a.body["category"].(string)
		return category, ""
	}
	e := errs[0].(map[string]any)
	if inner, ok := e["errors"].([]any); ok && len(inner) > 0 {
		category, _ = e["category"].(string)
		code, _ = inner[0].(map[string]any)["code"].(string)
		return category, code
	}
	category, _ = a.body["category"].(string)
	code, _ = e["code"].(string)
	return category, code
}

func TestUpsert(t *testing.T) {
	b := setup(t, nil)
	a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("Ada@Example.com", "li_1", map[string]string{"email": "ada@example.com", "firstname": "Ada"})))
	if a.status != 200 || a.body["status"] != "COMPLETE" {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	res := a.body["results"].([]any)[0].(map[string]any)
	id, _ := res["id"].(string)
	if id == "" || strings.Trim(id, "0123456789") != "" || res["new"] != true || res["objectWriteTraceId"] != "li_1" {
		t.Errorf("result %v: want a new contact with an id of digits and the trace id", res)
	}
	// The same email again, in other letters: the same contact.
	a = b.do(t, "POST", upsertPath, bearer, upsertBody(input("ada@example.com", "li_2", map[string]string{"lastname": "Lovelace"})))
	res = a.body["results"].([]any)[0].(map[string]any)
	if a.status != 200 || res["id"] != id || res["new"] != false {
		t.Errorf("second upsert %d %v: want contact %s, not new", a.status, res, id)
	}
	c, _ := b.f.Contact(id)
	if b.f.Records() != 1 || c.Properties["firstname"] != "Ada" || c.Properties["lastname"] != "Lovelace" || c.Properties["email"] != "ada@example.com" {
		t.Errorf("%d contacts, %v", b.f.Records(), c.Properties)
	}
	// Any date version.
	if a := b.do(t, "POST", "/crm/objects/2026-03/contacts/batch/upsert", bearer, upsertBody(input("grace@example.com", "li_3", nil))); a.status != 200 {
		t.Errorf("2026-03: %d %s", a.status, a.raw)
	}
}

func TestUpsertRefusals(t *testing.T) {
	ok := input("ada@example.com", "li_1", map[string]string{"firstname": "Ada"})
	for _, tc := range []struct {
		name     string
		path     string
		auth     string
		body     any
		status   int
		category string
		code     string
		quotes   string // the message quotes the refused value, as HubSpot's do
	}{
		{name: "NoToken", body: upsertBody(ok), status: 401, category: "INVALID_AUTHENTICATION"},
		{name: "WrongToken", auth: "Bearer pat-na1-other", body: upsertBody(ok), status: 401, category: "INVALID_AUTHENTICATION"},
		{name: "NotBearer", auth: token, body: upsertBody(ok), status: 401, category: "INVALID_AUTHENTICATION"},
		{name: "NotAVersion", path: "/crm/objects/v3/contacts/batch/upsert", body: upsertBody(ok), status: 404},
		{name: "MalformedBody", body: `{"inputs": [`, status: 400, category: "VALIDATION_ERROR"},
		{name: "UnknownMember", body: map[string]any{"inputs": []any{map[string]any{"idProperty": "email", "id": "a@b.example", "props": map[string]string{}}}},
			status: 400, category: "VALIDATION_ERROR"},
		{name: "NoInputs", body: upsertBody(), status: 400, category: "VALIDATION_ERROR"},
		{name: "NoIDProperty", body: upsertBody(map[string]any{"id": "ada@example.com", "properties": map[string]string{}}), status: 400, category: "VALIDATION_ERROR"},
		{name: "NonUniqueIDProperty", body: upsertBody(map[string]any{"idProperty": "firstname", "id": "Ada", "properties": map[string]string{}}),
			status: 400, category: "VALIDATION_ERROR", quotes: "non-unique"},
		{name: "TwoInputsOneContact", body: upsertBody(ok, input("ADA@example.com", "li_2", nil)), status: 400, category: "VALIDATION_ERROR", quotes: "ADA@example.com"},
		{name: "InvalidEmail", body: upsertBody(input("ada.example.com", "li_1", nil)), status: 207, category: "VALIDATION_ERROR", code: "INVALID_EMAIL",
			quotes: "ada.example.com"},
		{name: "PropertyDoesNotExist", body: upsertBody(input("ada@example.com", "li_1", map[string]string{"favourite_colour": "blue"})), status: 207,
			category: "VALIDATION_ERROR", code: "PROPERTY_DOESNT_EXIST", quotes: "favourite_colour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, nil)
			path, auth := tc.path, tc.auth
			if path == "" {
				path = upsertPath
			}
			if auth == "" && tc.name != "NoToken" {
				auth = bearer
			}
			a := b.do(t, "POST", path, auth, tc.body)
			category, code := firstError(a)
			if a.status != tc.status || category != tc.category || code != tc.code {
				t.Errorf("%d %s %s, want %d %s %s: %s", a.status, category, code, tc.status, tc.category, tc.code, a.raw)
			}
			if tc.quotes != "" && !strings.Contains(a.raw, tc.quotes) {
				t.Errorf("answer %s does not quote %q", a.raw, tc.quotes)
			}
			if n := b.f.Records(); n != 0 {
				t.Errorf("%d contacts after a refusal", n)
			}
		})
	}
}

func TestMultiStatus(t *testing.T) {
	b := setup(t, nil)
	a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("ada@example.com", "li_good", nil), input("not-an-email", "li_bad", nil)))
	if a.status != 207 || len(a.body["results"].([]any)) != 1 || a.body["numErrors"] != float64(1) {
		t.Fatalf("%d %s: want 207 with one result and one error", a.status, a.raw)
	}
	e := a.body["errors"].([]any)[0].(map[string]any)
	if e["status"] != "error" || e["category"] != "VALIDATION_ERROR" || !strings.Contains(e["message"].(string), `"error":"INVALID_EMAIL"`) {
		t.Errorf("error %v", e)
	}
	if ctx, _ := e["context"].(map[string]any); ctx == nil || ctx["objectWriteTraceId"].([]any)[0] != "li_bad" {
		t.Errorf("error context %v: want the input's objectWriteTraceId", e["context"])
	}
	if b.f.Records() != 1 {
		t.Errorf("%d contacts, want 1", b.f.Records())
	}
}

func TestRequiredOnCreateFrom2026_09(t *testing.T) {
	b := setup(t, &hubspotfake.Options{RequiredOnCreate: []string{"jobtitle"}})
	if a := b.do(t, "POST", "/crm/objects/2026-03/contacts/batch/upsert", bearer, upsertBody(input("old@example.com", "li_1", nil))); a.status != 200 {
		t.Errorf("2026-03 ignores the portal's rules: %d %s", a.status, a.raw)
	}
	a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("new@example.com", "li_2", nil)))
	if _, code := firstError(a); a.status != 207 || code != "MISSING_REQUIRED_PROPERTY" {
		t.Errorf("2026-09 create without jobtitle: %d %s", a.status, a.raw)
	}
	// Updating a contact that exists requires nothing.
	if a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("old@example.com", "li_3", map[string]string{"firstname": "Old"}))); a.status != 200 {
		t.Errorf("2026-09 update: %d %s", a.status, a.raw)
	}
	if a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("new@example.com", "li_4", map[string]string{"jobtitle": "CTO"}))); a.status != 200 {
		t.Errorf("2026-09 create with jobtitle: %d %s", a.status, a.raw)
	}
}

func TestOwnersAndReadOnly(t *testing.T) {
	b := setup(t, &hubspotfake.Options{Owners: []string{"9001"}})
	a := b.do(t, "POST", upsertPath, bearer, upsertBody(input("ada@example.com", "li_1", map[string]string{"hubspot_owner_id": "9002"})))
	if _, code := firstError(a); code != "INVALID_OPTION" {
		t.Errorf("unknown owner: %d %s", a.status, a.raw)
	}
	ro := setup(t, &hubspotfake.Options{ReadOnly: true})
	a = ro.do(t, "POST", upsertPath, bearer, upsertBody(input("ada@example.com", "li_1", nil)))
	if category, _ := firstError(a); a.status != 403 || category != "MISSING_SCOPES" {
		t.Errorf("write with a read-only key: %d %s", a.status, a.raw)
	}
	if a := ro.do(t, "GET", "/crm/objects/2026-09/contacts?limit=1", bearer, nil); a.status != 200 {
		t.Errorf("read with a read-only key: %d %s", a.status, a.raw)
	}
}

// contact makes a contact and returns its id.
func (b *bundle) contact(t *testing.T, email string) string {
	t.Helper()
	a := b.do(t, "POST", upsertPath, bearer, upsertBody(input(email, "li_"+email, map[string]string{"firstname": "X"})))
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	return a.body["results"].([]any)[0].(map[string]any)["id"].(string)
}

func TestUpdate(t *testing.T) {
	b := setup(t, nil)
	ada, grace := b.contact(t, "ada@example.com"), b.contact(t, "grace@example.com")
	path := "/crm/objects/2026-09/contacts/"

	a := b.do(t, "PATCH", path+ada, bearer, map[string]any{"properties": map[string]string{"email": "Ada.King@example.com", "lastname": "King"}})
	if a.status != 200 || a.body["id"] != ada {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	if c, ok := b.f.ContactByEmail("ada.king@example.com"); !ok || c.ID != ada || c.Properties["lastname"] != "King" {
		t.Errorf("contact by its new email: %v %v", c, ok)
	}
	if _, ok := b.f.ContactByEmail("ada@example.com"); ok {
		t.Error("the old email still finds the contact")
	}
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		category   string
	}{
		{name: "AnotherContactsEmail", path: path + ada, body: map[string]any{"properties": map[string]string{"email": "GRACE@example.com"}},
			status: 409, category: "CONFLICT"},
		{name: "UnknownID", path: path + "424242", body: map[string]any{"properties": map[string]string{"firstname": "Y"}}, status: 404, category: "OBJECT_NOT_FOUND"},
		{name: "InvalidEmail", path: path + ada, body: map[string]any{"properties": map[string]string{"email": "ada"}}, status: 400, category: "VALIDATION_ERROR"},
		{name: "NoProperties", path: path + ada, body: map[string]any{}, status: 400, category: "VALIDATION_ERROR"},
		{name: "NotAProperty", path: path + ada, body: map[string]any{"properties": map[string]string{"shoe_size": "9"}}, status: 400, category: "VALIDATION_ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := b.do(t, "PATCH", tc.path, bearer, tc.body)
			if category, _ := firstError(a); a.status != tc.status || category != tc.category {
				t.Errorf("%d %s, want %d %s", a.status, a.raw, tc.status, tc.category)
			}
		})
	}
	if c, _ := b.f.Contact(grace); c.Properties["email"] != "grace@example.com" || b.f.Records() != 2 {
		t.Errorf("grace's contact %v, %d contacts", c.Properties, b.f.Records())
	}
	// By email.
	if a := b.do(t, "PATCH", path+"grace@example.com?idProperty=email", bearer, map[string]any{"properties": map[string]string{"lastname": "Hopper"}}); a.status != 200 || a.body["id"] != grace {
		t.Errorf("update by email: %d %s", a.status, a.raw)
	}
}

func TestRead(t *testing.T) {
	b := setup(t, nil)
	ada := b.contact(t, "ada@example.com")
	b.contact(t, "grace@example.com")
	path := "/crm/objects/2026-09/contacts/"
	if a := b.do(t, "GET", path+"ADA@example.com?idProperty=email", bearer, nil); a.status != 200 || a.body["id"] != ada {
		t.Errorf("by email: %d %s", a.status, a.raw)
	}
	if a := b.do(t, "GET", path+ada, bearer, nil); a.status != 200 || a.body["properties"].(map[string]any)["email"] != "ada@example.com" {
		t.Errorf("by id: %d %s", a.status, a.raw)
	}
	if a := b.do(t, "GET", path+"nobody@example.com?idProperty=email", bearer, nil); a.status != 404 {
		t.Errorf("unknown email: %d %s", a.status, a.raw)
	}
	if a := b.do(t, "GET", path+ada, "Bearer wrong", nil); a.status != 401 {
		t.Errorf("wrong token: %d", a.status)
	}
	a := b.do(t, "GET", "/crm/objects/2026-09/contacts?limit=1", bearer, nil)
	if results, _ := a.body["results"].([]any); a.status != 200 || len(results) != 1 || a.body["paging"] == nil {
		t.Errorf("list: %d %s", a.status, a.raw)
	}
	if a := b.do(t, "GET", "/crm/objects/2026-09/contacts?limit=0", bearer, nil); a.status != 400 {
		t.Errorf("limit 0: %d", a.status)
	}
	// properties chooses what is shown, instead of the default ones;
	// one the contact lacks is left out.
	a = b.do(t, "GET", path+ada+"?properties=email,company&properties=firstname", bearer, nil)
	props, _ := a.body["properties"].(map[string]any)
	if _, hasCompany := props["company"]; a.status != 200 || props["email"] != "ada@example.com" || props["firstname"] != "X" || hasCompany {
		t.Errorf("properties: %d %s", a.status, a.raw)
	}
	a = b.do(t, "GET", path+ada+"?properties=company", bearer, nil)
	if props, _ := a.body["properties"].(map[string]any); a.status != 200 || props["email"] != nil || props["firstname"] != nil {
		t.Errorf("properties: %d %s", a.status, a.raw)
	}
}

func TestRateLimit(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b := setup(t, &hubspotfake.Options{TenSecondLimit: 2, Now: clock})
	list := "/crm/objects/2026-09/contacts?limit=1"
	for i, want := range []string{"1", "0"} {
		a := b.do(t, "GET", list, bearer, nil)
		if a.status != 200 || a.header.Get("X-HubSpot-RateLimit-Remaining") != want || a.header.Get("X-HubSpot-RateLimit-Max") != "2" {
			t.Fatalf("call %d: %d, remaining %q", i+1, a.status, a.header.Get("X-HubSpot-RateLimit-Remaining"))
		}
	}
	a := b.do(t, "GET", list, bearer, nil)
	if a.status != 429 || a.header.Get("X-HubSpot-RateLimit-Remaining") != "0" || a.header.Get("X-HubSpot-RateLimit-Interval-Milliseconds") != "10000" ||
		a.body["errorType"] != "RATE_LIMIT" || a.body["policyName"] != "TEN_SECONDLY_ROLLING" {
		t.Errorf("over the limit: %d %v %s", a.status, a.header, a.raw)
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	if a := b.do(t, "GET", list, bearer, nil); a.status != 200 {
		t.Errorf("after the interval: %d", a.status)
	}
}

func TestControl(t *testing.T) {
	b := setup(t, nil)
	post := func(path, body string) int {
		t.Helper()
		resp, err := http.Post(b.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A lost answer: applied, never answered.
	if s := post("/_standin/script", `{"target":"upsert","faults":[{"drop_after_apply":true}]}`); s != 204 {
		t.Fatalf("script: %d", s)
	}
	req, _ := http.NewRequest("POST", b.url+upsertPath, strings.NewReader(`{"inputs":[{"idProperty":"email","id":"ada@example.com","properties":{}}]}`))
	req.Header.Set("Authorization", bearer)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d, want a dropped connection", resp.StatusCode)
	}
	if b.f.Records() != 1 {
		t.Errorf("%d contacts after the lost answer, want 1", b.f.Records())
	}
	if s := post("/_standin/script", `{"target":"upsert","faults":[{"dropp":true}]}`); s != 400 {
		t.Errorf("script with a typo: %d", s)
	}
	if s := post("/_standin/credentials", `{"refuse":true}`); s != 204 {
		t.Fatalf("credentials: %d", s)
	}
	if a := b.do(t, "GET", "/crm/objects/2026-09/contacts", bearer, nil); a.status != 401 {
		t.Errorf("refused credentials: %d", a.status)
	}
	resp, err := http.Get(b.url + "/_standin/state")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st hubspotfake.State
	if err := json.Unmarshal(raw, &st); err != nil || st.Contacts != 1 || st.Requests["upsert"] != 1 || st.Requests["list"] != 1 || !st.RefusingCredentials {
		t.Errorf("state %s", raw)
	}
	if strings.Contains(string(raw), "ada") {
		t.Errorf("state %s shows personal data", raw)
	}
	if s := post("/_standin/reset", ``); s != 204 {
		t.Fatalf("reset: %d", s)
	}
	if st := b.f.State(); st.Contacts != 0 || st.RefusingCredentials || len(st.Requests) != 0 {
		t.Errorf("state after reset %+v", st)
	}
}
