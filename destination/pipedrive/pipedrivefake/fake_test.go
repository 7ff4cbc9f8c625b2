package pipedrivefake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination/pipedrive/pipedrivefake"
	"github.com/leadintake/leadintake/internal/standin"
)

const (
	tok      = "standin-token-1"
	ref      = "5e1fa2c0d6b84e33a1d3f6b0c9e27a4b8d1c0f92"
	otherKey = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9"
)

type client struct {
	t    *testing.T
	base string
}

type answer struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func start(t *testing.T, opts *pipedrivefake.Options) (*pipedrivefake.Server, client) {
	t.Helper()
	if opts == nil {
		opts = &pipedrivefake.Options{}
	}
	if opts.Token == "" {
		opts.Token = tok
	}
	if opts.RefField == "" {
		opts.RefField = ref
	}
	f := pipedrivefake.New(opts)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return f, client{t: t, base: ts.URL}
}

// do sends method path with body (JSON when not a string) and the token
// (none when token is "").
func (c client) do(method, path, token string, body any) answer {
	c.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd, ct = strings.NewReader(b), "text/plain"
	default:
		j, _ := json.Marshal(b)
		rd = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("x-api-token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	_ = json.Unmarshal(raw, &a.Body)
	return a
}

func (c client) person(email string) int64 {
	c.t.Helper()
	a := c.do("POST", "/api/v2/persons", tok, map[string]any{"name": "Ada", "emails": []any{map[string]any{"value": email, "primary": true, "label": "work"}}})
	if a.Status != 200 {
		c.t.Fatalf("person: %d %s", a.Status, a.Raw)
	}
	return int64(a.Body["data"].(map[string]any)["id"].(float64))
}

func (c client) lead(person int64, reference string) string {
	c.t.Helper()
	a := c.do("POST", "/v1/leads", tok, map[string]any{"title": "Acme (leadintake)", "person_id": person, ref: reference})
	if a.Status != 201 {
		c.t.Fatalf("lead: %d %s", a.Status, a.Raw)
	}
	return a.Body["data"].(map[string]any)["id"].(string)
}

func (c client) searchIDs(email string) []int64 {
	c.t.Helper()
	a := c.do("GET", "/api/v2/persons/search?term="+email+"&fields=email&exact_match=true", tok, nil)
	if a.Status != 200 {
		c.t.Fatalf("search: %d %s", a.Status, a.Raw)
	}
	var ids []int64
	for _, it := range a.Body["data"].(map[string]any)["items"].([]any) {
		ids = append(ids, int64(it.(map[string]any)["item"].(map[string]any)["id"].(float64)))
	}
	return ids
}

func requireError(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.Status != status || a.Body["success"] != false || a.Body["error"] == nil {
		t.Fatalf("%d %s, want %d in Pipedrive's error shape", a.Status, a.Raw, status)
	}
	if code != "" && a.Body["code"] != code {
		t.Errorf("code %v, want %s", a.Body["code"], code)
	}
}

func TestRefusesAMissingOrWrongToken(t *testing.T) {
	f, c := start(t, nil)
	for name, a := range map[string]answer{
		"none":     c.do("GET", "/v1/users/me", "", nil),
		"wrong":    c.do("GET", "/v1/users/me", tok+"x", nil),
		"in query": c.do("GET", "/v1/users/me?api_token="+tok, "", nil),
	} {
		requireError(t, a, 401, "")
		if a.Body["errorCode"] != float64(401) || a.Body["error"] != "unauthorized access" {
			t.Errorf("%s: %s", name, a.Raw)
		}
	}
	if a := c.do("GET", "/v1/users/me", tok, nil); a.Status != 200 || a.Body["success"] != true {
		t.Fatalf("the right token: %d %s", a.Status, a.Raw)
	}
	f.SetRefuseCredentials(true)
	requireError(t, c.do("POST", "/api/v2/persons", tok, map[string]any{"name": "Ada"}), 401, "")
	if f.Persons() != 0 {
		t.Error("a refused create was applied")
	}
	f.SetRefuseCredentials(false)
	c.person("ada@example.com")
}

func TestRateLimitHeaders(t *testing.T) {
	f, c := start(t, nil)
	a := c.do("GET", "/v1/users/me", tok, nil)
	for _, h := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
		if a.Header.Get(h) == "" {
			t.Errorf("no %s on an answer", h)
		}
	}
	f.Script(pipedrivefake.TargetAny, pipedrivefake.RateLimitFault(3))
	a = c.do("GET", "/v1/leads", tok, nil)
	requireError(t, a, 429, "")
	if a.Header.Get("x-ratelimit-remaining") != "0" || a.Header.Get("x-ratelimit-reset") != "3" || a.Header.Get("Retry-After") != "" {
		t.Errorf("429 headers %v", a.Header)
	}
	if a := c.do("GET", "/api/v2/persons/search?term=x", tok, nil); a.Status != 200 {
		t.Errorf("a fault for any request met two: %d", a.Status)
	}
}

func TestPersonSearch(t *testing.T) {
	_, c := start(t, nil)
	id := c.person("Ada@Example.com")
	c.person("ada@example.com.evil")
	if ids := c.searchIDs("ada@example.com"); len(ids) != 1 || ids[0] != id {
		t.Errorf("exact search found %v, want [%d]", ids, id)
	}
	a := c.do("GET", "/api/v2/persons/search?term=ada@example&fields=email", tok, nil)
	if items := a.Body["data"].(map[string]any)["items"].([]any); len(items) != 2 {
		t.Errorf("a search that is not exact found %d, want 2", len(items))
	}
	requireError(t, c.do("GET", "/api/v2/persons/search", tok, nil), 400, "")
	requireError(t, c.do("POST", "/api/v2/persons", tok, map[string]any{"emails": []any{map[string]any{"value": "x@y"}}}), 400, "")
	requireError(t, c.do("POST", "/api/v2/persons", tok, map[string]any{"name": "Ada", "email": "x@y"}), 400, "")
}

func TestSearchLag(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f, c := start(t, &pipedrivefake.Options{Now: clock, Lag: pipedrivefake.Lag{Searches: 2}})
	c.person("ada@example.com")
	for i := range 2 {
		if ids := c.searchIDs("ada@example.com"); len(ids) != 0 {
			t.Fatalf("search %d found the person", i+1)
		}
	}
	if ids := c.searchIDs("ada@example.com"); len(ids) != 1 {
		t.Fatal("the third search missed the person")
	}
	f.SetLag(pipedrivefake.Lag{For: time.Minute})
	c.person("bob@example.com")
	if ids := c.searchIDs("bob@example.com"); len(ids) != 0 {
		t.Fatal("found at once")
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if ids := c.searchIDs("bob@example.com"); len(ids) != 1 {
		t.Fatal("not found after the lag")
	}
}

func TestLeadRefusals(t *testing.T) {
	f, c := start(t, &pipedrivefake.Options{FieldKeys: []string{otherKey}, Users: []int64{1, 7}})
	p := c.person("ada@example.com")
	good := func() map[string]any { return map[string]any{"title": "Acme", "person_id": p, ref: "li_1"} }
	with := func(k string, v any) map[string]any { m := good(); m[k] = v; return m }
	without := func(k string) map[string]any { m := good(); delete(m, k); return m }
	tests := map[string]any{
		"NotJSON":          "title=Acme",
		"NotAnObject":      []any{good()},
		"NoTitle":          without("title"),
		"EmptyTitle":       with("title", " "),
		"NoPerson":         without("person_id"),
		"UnknownPerson":    with("person_id", p+100),
		"UnknownOrg":       with("organization_id", 5),
		"UnknownOwner":     with("owner_id", 424242),
		"UnknownFieldKey":  with("ffffffffffffffffffffffffffffffffffffffff", "x"),
		"UnknownMember":    with("email", "ada@example.com"),
		"RefFieldNotText":  with(ref, 12),
		"CustomFieldAsObj": with(otherKey, map[string]any{"a": 1}),
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			a := c.do("POST", "/v1/leads", tok, body)
			requireError(t, a, 400, "ERR_SCHEMA_VALIDATION_FAILED")
		})
	}
	if n := len(f.Leads()); n != 0 {
		t.Fatalf("%d leads made by refused requests", n)
	}
	a := c.do("POST", "/v1/leads", tok, with(otherKey, "10k"))
	if a.Status != 201 {
		t.Fatalf("%d %s", a.Status, a.Raw)
	}
	data := a.Body["data"].(map[string]any)
	if data[ref] != "li_1" || data[otherKey] != "10k" || data["person_id"] != float64(p) || data["is_archived"] != false {
		t.Errorf("the lead as answered: %v", data)
	}
	id := data["id"].(string)
	requireError(t, c.do("PATCH", "/v1/leads/"+id, tok, map[string]any{"origin_id": "x"}), 400, "")
	requireError(t, c.do("PATCH", "/v1/leads/"+id, tok, map[string]any{"title": "B", "owner_id": 999}), 400, "")
	if l := f.Leads()[0]; l.Title != "Acme" {
		t.Errorf("a refused update changed the title to %q", l.Title)
	}
	if a := c.do("PATCH", "/v1/leads/"+id, tok, map[string]any{"title": "B", "owner_id": 7}); a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Raw)
	}
	if l := f.Leads()[0]; l.Title != "B" || l.OwnerID != 7 {
		t.Errorf("the update was not applied: %+v", l)
	}

	f.Archive(id)
	requireError(t, c.do("PATCH", "/v1/leads/"+id, tok, map[string]any{"title": "C"}), 400, "")
	f.Convert(id)
	requireError(t, c.do("PATCH", "/v1/leads/"+id, tok, map[string]any{"title": "C"}), 404, "")
}

func TestLeadLists(t *testing.T) {
	f, c := start(t, &pipedrivefake.Options{PageMax: 2})
	ada, bob := c.person("ada@example.com"), c.person("bob@example.com")
	var ids []string
	for i := range 3 {
		ids = append(ids, c.lead(ada, "li_"+strconv.Itoa(i)))
	}
	c.lead(bob, "li_bob")
	f.Archive(ids[1])
	list := func(path string) (got []string, more bool) {
		a := c.do("GET", path, tok, nil)
		if a.Status != 200 {
			t.Fatalf("%s: %d %s", path, a.Status, a.Raw)
		}
		for _, l := range a.Body["data"].([]any) {
			got = append(got, l.(map[string]any)["id"].(string))
		}
		pg := a.Body["additional_data"].(map[string]any)["pagination"].(map[string]any)
		return got, pg["more_items_in_collection"].(bool)
	}
	id := strconv.FormatInt(ada, 10)
	if got, more := list("/v1/leads?person_id=" + id + "&limit=500"); strings.Join(got, ",") != ids[0]+","+ids[2] || more {
		t.Errorf("open leads %v (more %v), want %v", got, more, []string{ids[0], ids[2]})
	}
	if got, _ := list("/v1/leads/archived?person_id=" + id); len(got) != 1 || got[0] != ids[1] {
		t.Errorf("archived leads %v, want %s", got, ids[1])
	}
	if got, more := list("/v1/leads"); len(got) != 2 || !more {
		t.Errorf("a page of every open lead: %d (more %v), want 2 and more", len(got), more)
	}
	if got, more := list("/v1/leads?start=2"); len(got) != 1 || more {
		t.Errorf("the second page: %d (more %v), want 1", len(got), more)
	}
	requireError(t, c.do("GET", "/v1/leads?limit=501", tok, nil), 400, "")
}

func TestDealField(t *testing.T) {
	_, c := start(t, &pipedrivefake.Options{RefFieldType: "text"})
	a := c.do("GET", "/api/v2/dealFields/"+ref, tok, nil)
	d, _ := a.Body["data"].(map[string]any)
	if a.Status != 200 || d["field_code"] != ref || d["field_type"] != "text" || d["is_custom_field"] != true {
		t.Errorf("%d %s", a.Status, a.Raw)
	}
	requireError(t, c.do("GET", "/api/v2/dealFields/"+otherKey, tok, nil), 404, "")
}

func TestControlAPI(t *testing.T) {
	f, c := start(t, nil)
	p := c.person("ada@example.com")
	id := c.lead(p, "li_1")
	ctl := func(path, body string) int {
		resp, err := http.Post(c.base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := ctl("/_standin/script", `{"target":"any","faults":[{"status":503}]}`); s != 204 {
		t.Fatalf("script: %d", s)
	}
	if a := c.do("GET", "/v1/users/me", tok, nil); a.Status != 503 {
		t.Errorf("the scripted fault: %d", a.Status)
	}
	for path, body := range map[string]string{
		"/_standin/script":      `{"target":"leads","faults":[]}`,
		"/_standin/chaos":       `{"target":"any","fail_rate":0.5}`,
		"/_standin/credentials": `{"refuse":true,"typo":1}`,
		"/_standin/lag":         `{"for":"soon"}`,
	} {
		if s := ctl(path, body); s != 400 {
			t.Errorf("%s %s: %d, want 400", path, body, s)
		}
	}
	if err := f.SetChaos(pipedrivefake.TargetAny, standin.Chaos{FailRate: 0.5}); err == nil {
		t.Error("chaos for any accepted")
	}
	if s := ctl("/_standin/credentials", `{"refuse":true}`); s != 204 || c.do("GET", "/v1/users/me", tok, nil).Status != 401 {
		t.Error("credentials not refused")
	}
	if s := ctl("/_standin/credentials", `{"refuse":false}`); s != 204 || c.do("GET", "/v1/users/me", tok, nil).Status != 200 {
		t.Error("credentials not restored")
	}
	if s := ctl("/_standin/lag", `{"searches":1,"for":"0s"}`); s != 204 {
		t.Errorf("lag: %d", s)
	}
	c.person("bob@example.com")
	if len(c.searchIDs("bob@example.com")) != 0 {
		t.Error("the lag set over HTTP is not in force")
	}
	if s := ctl("/_standin/leads/nope/archive", ``); s != 404 {
		t.Errorf("archive of no lead: %d", s)
	}
	if s := ctl("/_standin/leads/"+id+"/archive", ``); s != 204 {
		t.Errorf("archive: %d", s)
	}

	resp, err := http.Get(c.base + "/_standin/state")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st pipedrivefake.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.Leads != 0 || st.ArchivedLeads != 1 || st.Persons != 2 || st.Requests[pipedrivefake.TargetLeadsCreate] != 1 {
		t.Errorf("state %s", raw)
	}
	if strings.Contains(string(raw), "@") || strings.Contains(string(raw), "Ada") || strings.Contains(string(raw), "li_1") {
		t.Errorf("the state shows personal data: %s", raw)
	}

	if s := ctl("/_standin/leads/"+id+"/convert", ``); s != 204 || len(f.Leads()) != 0 {
		t.Errorf("convert: %d, %d leads", s, len(f.Leads()))
	}
	if s := ctl("/_standin/reset", ``); s != 204 || f.Persons() != 0 || f.State().Requests[pipedrivefake.TargetLeadsCreate] != 0 {
		t.Errorf("reset: %d, %+v", s, f.State())
	}
}
