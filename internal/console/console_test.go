package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/console"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var hashKey = lead.HashKey("console-test-pii-hash-key-0123456789")

// The logins of the tests: ADMIN_USER, an operator and a viewer of the
// clients file.
var (
	adminLogin = login{"admin-user", "admin-password-0000"}
	alice      = login{"alice", "alice-password-0001"}
	bob        = login{"bob", "bob-password-0002"}
)

type login struct{ user, password string }

const clientsFile = `
operators:
  - name: alice
    password_bcrypt: $2a$10$cff7QJvzRatlXqQVt6lrJebbajEGeETCLHrH291GOoU67PkYO/TzS
    role: operator
  - name: bob
    password_bcrypt: $2a$10$U7m4co3ATLwX3VwZFo8VQe33D0dkqNoEyTJOt4wiFzbpVIrjDmkPq
    role: viewer
clients:
  - id: a
  - id: b
`

// shared are the clients and logins every test uses: a bcrypt comparison
// is slow by design (seconds under the race detector), and Logins
// remembers a right pair, once for the package.
var shared = sync.OnceValues(func() (*callers.Holder, error) {
	set, err := callers.ParseFile([]byte(clientsFile))
	if err != nil {
		return nil, err
	}
	return callers.NewHolder(set), nil
})

var sharedLogins = sync.OnceValue(func() *console.Logins {
	h, _ := shared()
	return console.NewLogins(h, nil)
})

// clock is a settable time for the limit on wrong credentials.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type bundle struct {
	t     *testing.T
	h     http.Handler
	op    *operator.Operator
	pool  *pgxpool.Pool
	clock *clock
}

// setup mounts the console on an admin handler, as the api does, with a
// database of the test's own.
func setup(t *testing.T) *bundle {
	t.Helper()
	holder, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	_, pool := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool)
	st.UseJobs(jobs.NewQueue(client, holder))
	op := &operator.Operator{Store: st, River: client, HashKey: hashKey, Callers: holder, KeyRetention: time.Hour}
	c := &clock{t: time.Now()}
	ch, err := console.NewHandler(&console.Opts{Operator: op})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(t.Context(), &admin.Opts{
		Gatherer: prometheus.NewRegistry(), User: adminLogin.user, Password: adminLogin.password,
		Console: ch, ConsoleLogin: sharedLogins().Check, Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, h: h, op: op, pool: pool, clock: c}
}

// page is one answer of the console.
type page struct {
	status int
	header http.Header
	body   string
}

// get GETs path as who.
func (b *bundle) get(who login, path string) page {
	b.t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://admin.test"+path, nil)
	req.SetBasicAuth(who.user, who.password)
	return b.do(req)
}

// post POSTs form to path as who, as a browser does from a console page.
func (b *bundle) post(who login, path string, form url.Values) page {
	b.t.Helper()
	return b.postWith(who, path, form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://admin.test"})
}

func (b *bundle) postWith(who login, path string, form url.Values, header map[string]string) page {
	b.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://admin.test"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(who.user, who.password)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return b.do(req)
}

func (b *bundle) do(req *http.Request) page {
	b.t.Helper()
	req.RemoteAddr = "192.0.2.1:1234"
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return page{status: rec.Code, header: rec.Header(), body: string(body)}
}

// claim claims a new key of client for body; quarantined for reasons when
// there are some.
func (b *bundle) claim(client, body string, reasons ...string) string {
	b.t.Helper()
	payload, err := lead.Decode([]byte(body), nil)
	if err != nil {
		b.t.Fatalf("decode %s: %v", body, err)
	}
	key := testkit.NewKey()
	p := &store.ClaimParams{
		ClientID: client, Key: key, ExternalRef: "ref-" + key, Payload: payload,
		Fingerprint: hashKey.Request(payload.Fingerprint[:]), EmailHMAC: hashKey.Email(payload.Lead.Email),
		Quarantine: reasons, Retention: time.Hour,
	}
	if _, err := b.op.Store.Claim(b.t.Context(), p); err != nil {
		b.t.Fatal(err)
	}
	return key
}

// fail finishes the client's key as failed with downstream_unavailable.
func (b *bundle) fail(client, key string) {
	b.t.Helper()
	d, err := b.op.Store.ShowKey(b.t.Context(), client, key)
	if err != nil {
		b.t.Fatal(err)
	}
	l, err := b.op.Store.Lead(b.t.Context(), d.LeadID)
	if err != nil {
		b.t.Fatal(err)
	}
	done, err := b.op.Store.Finish(b.t.Context(), &store.Finish{
		LeadID: l.ID, ClientID: client, Key: key, From: l.KeyState.State, To: lead.KeyFailed,
		Response:    response.NewFailed(l.ID.String(), response.CodeDownstreamUnavailable, "the CRM did not answer"),
		FailureCode: response.CodeDownstreamUnavailable, Retention: time.Hour,
		Result: &store.Result{State: l.State},
	})
	if err != nil || !done.Applied {
		b.t.Fatalf("finish: %+v %v", done, err)
	}
}

func (b *bundle) state(client, key string) lead.KeyState {
	b.t.Helper()
	d, err := b.op.Store.ShowKey(b.t.Context(), client, key)
	if err != nil {
		b.t.Fatal(err)
	}
	return d.State
}

func (b *bundle) audit() []store.AuditEntry {
	b.t.Helper()
	entries, err := b.op.Audit(b.t.Context(), store.AuditFilter{})
	if err != nil {
		b.t.Fatal(err)
	}
	return entries
}

func keyPath(client, key string) string { return "/console/keys/" + client + "/" + key }

const plainBody = `{"email":"ada@example.com","source":"website","name":"Ada Lovelace","company":"Analytical Engines"}`

// Every page answers an operator, without personal data where it lists
// leads, and with the headers that keep a browser from caching or running
// anything it did not load from the console.
func TestPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.claim("a", plainBody)
	quarantined := b.claim("b", plainBody, "honeypot", "too_fast")
	for _, c := range []struct{ path, want string }{
		{"/console/leads", key},
		{"/console/leads?client=a&state=processing&within=24h", key},
		{keyPath("a", key), "Show the enquiry"},
		{"/console/quarantine", "honeypot, too_fast"},
		{"/console/redrive", "Every failed key"},
		{"/console/destinations", "Destinations"},
		{"/console/audit", "Nothing recorded"},
		{"/console/static/console.css", "table.list"},
	} {
		p := b.get(alice, c.path)
		if p.status != http.StatusOK || !strings.Contains(p.body, c.want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", c.path, p.status, c.want, p.body)
			continue
		}
		if p.header.Get("Cache-Control") != "no-store" || !strings.Contains(p.header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: headers %v", c.path, p.header)
		}
		if strings.HasSuffix(c.path, ".css") {
			continue
		}
		for _, pii := range []string{"ada@example.com", "Lovelace", "Analytical"} {
			if strings.Contains(p.body, pii) {
				t.Errorf("GET %s shows personal data (%s)", c.path, pii)
			}
		}
	}
	if p := b.get(alice, "/console/leads?client=b"); strings.Contains(p.body, key) || !strings.Contains(p.body, quarantined) {
		t.Error("the filter by client does not filter")
	}
	if p := b.get(alice, "/console/"); p.status != http.StatusFound || p.header.Get("Location") != "/console/leads" {
		t.Errorf("GET /console/: %d %v", p.status, p.header)
	}
	if p := b.get(alice, "/console/nothing"); p.status != http.StatusNotFound {
		t.Errorf("GET /console/nothing: %d", p.status)
	}
	if p := b.get(alice, keyPath("a", "no-such-key-0001")); p.status != http.StatusNotFound {
		t.Errorf("GET an unknown key: %d", p.status)
	}
	// A filter that is not one of its choices is refused, not guessed.
	for _, q := range []string{"state=lost", "outcome=maybe", "within=5y", "owner=Bob%20Smith", "after=garbage", "client=a%20b"} {
		if p := b.get(alice, "/console/leads?"+q); p.status != http.StatusBadRequest {
			t.Errorf("GET /console/leads?%s: %d, want 400", q, p.status)
		}
	}
	// Without credentials, or with wrong ones, nothing.
	req := httptest.NewRequest(http.MethodGet, "/console/leads", nil)
	if p := b.do(req); p.status != http.StatusUnauthorized {
		t.Errorf("GET without credentials: %d", p.status)
	}
}

// The leads page pages by a keyset: a link to the next page, each key on
// one page only.
func TestLeadsPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 51 {
		key := b.claim("a", plainBody)
		if _, err := b.pool.Exec(t.Context(), `UPDATE idempotency_keys SET created_at = now() - $2 * interval '1 second' WHERE key = $1`, key, i); err != nil {
			t.Fatal(err)
		}
	}
	first := b.get(alice, "/console/leads?client=a")
	if n := strings.Count(first.body, `data-label="Key"`); n != 50 {
		t.Fatalf("the first page has %d keys, want 50", n)
	}
	_, rest, ok := strings.Cut(first.body, `rel="next" href="`)
	next, _, _ := strings.Cut(rest, `"`)
	if !ok || !strings.Contains(next, "after=") || !strings.Contains(next, "client=a") {
		t.Fatalf("no link to the next page: %q", next)
	}
	second := b.get(alice, strings.ReplaceAll(next, "&amp;", "&"))
	if n := strings.Count(second.body, `data-label="Key"`); second.status != http.StatusOK || n != 1 || strings.Contains(second.body, `rel="next"`) {
		t.Fatalf("the second page: %d, %d keys\n%s", second.status, n, second.body)
	}
}

// Visitor text is shown as text: HTML and script in every visitor field
// of an enquiry come out escaped, and the look is recorded.
func TestEnquiryEscapesVisitorText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.claim("a", hostileBody)
	p := b.post(alice, keyPath("a", key)+"/enquiry", nil)
	if p.status != http.StatusOK {
		t.Fatalf("show the enquiry: %d\n%s", p.status, p.body)
	}
	for _, want := range []string{
		"&lt;script&gt;alert(&#34;name&#34;)&lt;/script&gt;",
		"&lt;img src=x onerror=alert(1)&gt;",
		"&lt;/textarea&gt;&lt;script&gt;alert(2)&lt;/script&gt;",
		"&lt;svg onload=alert(3)&gt;",
		"&#34;&gt;&lt;iframe src=javascript:alert(4)&gt;",
		"https://landing.example/?q=&lt;script&gt;alert(5)&lt;/script&gt;",
		"&lt;script&gt;alert(6)&lt;/script&gt;",
		"o&#39;brien&amp;co@example.com",
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", "<iframe", "</textarea><script"} {
		if strings.Contains(p.body, raw) {
			t.Errorf("the page holds %s unescaped", raw)
		}
	}
	if strings.Count(p.body, "<script") != 1 {
		t.Errorf("the page holds %d scripts, want the console's own", strings.Count(p.body, "<script"))
	}
	rows := b.audit()
	if len(rows) != 1 || rows[0].Actor != "alice" || rows[0].Action != store.ActionShowEnquiry || rows[0].Keys[0].Key != key {
		t.Errorf("audit %+v", rows)
	}
	// The look is a POST: a GET of the same path is no page.
	if g := b.get(alice, keyPath("a", key)+"/enquiry"); g.status == http.StatusOK {
		t.Error("GET shows the enquiry")
	}
}

// hostileBody holds HTML and script in every visitor field that may hold
// it.
const hostileBody = `{"email":"o'brien&co@example.com","source":"website",
"name":"<script>alert(\"name\")</script>","company":"<img src=x onerror=alert(1)>","phone":"<b>+44</b>",
"website":"https://x.example/\"><script>alert(7)</script>","message":"</textarea><script>alert(2)</script>",
"utm":{"utm_source":"<svg onload=alert(3)>"},"fields":{"budget":"\"><iframe src=javascript:alert(4)>"},
"attribution":{"first":{"landing_page":"https://landing.example/?q=<script>alert(5)</script>","referrer":"https://ref.example/<b>",
"utm":{"utm_campaign":"<u>c</u>"},"click_ids":{"gclid":"<script>alert(6)</script>"}},
"last":{"landing_page":"https://acme.example/contact"}}}`

// A viewer sees every page but the enquiry, and writes nothing: each write
// is 403, nothing changed, nothing recorded.
func TestViewer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	quarantined := b.claim("a", plainBody, "honeypot")
	failed := b.claim("a", plainBody)
	b.fail("a", failed)
	for _, path := range []string{"/console/leads", keyPath("a", quarantined), "/console/quarantine", "/console/redrive", "/console/destinations", "/console/audit"} {
		p := b.get(bob, path)
		if p.status != http.StatusOK {
			t.Errorf("GET %s as a viewer: %d", path, p.status)
		}
		if strings.Contains(p.body, "Show the enquiry") || strings.Contains(p.body, `name="key" value="a/`) {
			t.Errorf("GET %s offers a viewer an action", path)
		}
	}
	for path, form := range map[string]url.Values{
		keyPath("a", quarantined) + "/enquiry": nil,
		keyPath("a", failed) + "/settle":       {"not_found": {"yes"}},
		"/console/quarantine/release":          {"key": {"a/" + quarantined}, "confirm": {"yes"}},
		"/console/redrive":                     {"mode": {"key"}, "client": {"a"}, "key": {failed}, "confirm": {"yes"}},
	} {
		if p := b.post(bob, path, form); p.status != http.StatusForbidden || !strings.Contains(p.body, "viewer") {
			t.Errorf("POST %s as a viewer: %d, want 403", path, p.status)
		}
	}
	if st := b.state("a", quarantined); st != lead.KeyQuarantined {
		t.Errorf("the quarantined key is %s", st)
	}
	if st := b.state("a", failed); st != lead.KeyFailed {
		t.Errorf("the failed key is %s", st)
	}
	if rows := b.audit(); len(rows) != 0 {
		t.Errorf("audit %+v", rows)
	}
}

// A write that a browser did not send from the console's pages is refused:
// another site's form (its Origin, or Sec-Fetch-Site cross-site), and one
// with neither header, which no browser's form lacks.
func TestForgedPosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	quarantined := b.claim("a", plainBody, "honeypot")
	form := url.Values{"key": {"a/" + quarantined}, "confirm": {"yes"}}
	for name, header := range map[string]map[string]string{
		"NoOrigin":          {},
		"OtherOrigin":       {"Origin": "https://evil.example"},
		"NullOrigin":        {"Origin": "null"},
		"CrossSite":         {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		"SameSiteOtherHost": {"Sec-Fetch-Site": "same-site", "Origin": "http://other.admin.test"},
	} {
		if p := b.postWith(alice, "/console/quarantine/release", form, header); p.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, p.status)
		}
	}
	if st := b.state("a", quarantined); st != lead.KeyQuarantined {
		t.Errorf("the key is %s", st)
	}
	if rows := b.audit(); len(rows) != 0 {
		t.Errorf("audit %+v", rows)
	}
	// From the console itself, by a browser without Sec-Fetch-Site: its
	// Origin.
	if p := b.postWith(alice, "/console/quarantine/release", form, map[string]string{"Origin": "http://admin.test"}); p.status != http.StatusOK {
		t.Errorf("same origin: %d", p.status)
	}
}

// A release names its keys and asks first; then releases the quarantined
// ones, leaves the others as they are and says why, as `api spam release`.
func TestRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q1, q2 := b.claim("a", plainBody, "honeypot"), b.claim("b", plainBody, "no_signals")
	notQuarantined := b.claim("a", plainBody)
	form := url.Values{"key": {"a/" + q1, "b/" + q2, "a/" + notQuarantined}}
	confirm := b.post(alice, "/console/quarantine/release", form)
	if confirm.status != http.StatusOK || !strings.Contains(confirm.body, "Release 3 keys?") || !strings.Contains(confirm.body, `name="confirm" value="yes"`) {
		t.Fatalf("the confirmation: %d\n%s", confirm.status, confirm.body)
	}
	if st := b.state("a", q1); st != lead.KeyQuarantined {
		t.Fatalf("released before the confirmation: %s", st)
	}
	form.Set("confirm", "yes")
	done := b.post(alice, "/console/quarantine/release", form)
	if done.status != http.StatusOK || !strings.Contains(done.body, "2 released") || !strings.Contains(done.body, notQuarantined) ||
		!strings.Contains(done.body, "processing") {
		t.Fatalf("the release: %d\n%s", done.status, done.body)
	}
	if b.state("a", q1) != lead.KeyProcessing || b.state("b", q2) != lead.KeyProcessing || b.state("a", notQuarantined) != lead.KeyProcessing {
		t.Error("the keys after the release")
	}
	var got []string
	for _, a := range b.audit() {
		got = append(got, fmt.Sprintf("%s %s %s %d", a.Actor, a.Action, a.ClientID, a.Count))
	}
	if strings.Join(got, "|") != "alice release b 1|alice release a 1" {
		t.Errorf("audit %v", got)
	}
	// Nothing selected; ten thousand selected.
	if p := b.post(alice, "/console/quarantine/release", url.Values{"confirm": {"yes"}}); p.status != http.StatusBadRequest {
		t.Errorf("no key: %d", p.status)
	}
	many := url.Values{"confirm": {"yes"}}
	for range 1001 {
		many.Add("key", "a/"+testkit.NewKey())
	}
	if p := b.post(alice, "/console/quarantine/release", many); p.status != http.StatusBadRequest || !strings.Contains(p.body, "1001 keys were selected at once; at most 1000") {
		t.Errorf("1001 keys: %d %s", p.status, p.body)
	}
	for range 9000 {
		many.Add("key", "a/"+testkit.NewKey())
	}
	if p := b.post(alice, "/console/quarantine/release", many); p.status != http.StatusRequestEntityTooLarge || !strings.Contains(p.body, "at most 1000 keys at once. Nothing was done.") {
		t.Errorf("ten thousand keys: %d %s", p.status, p.body)
	}
	if n := len(b.audit()); n != 2 {
		t.Errorf("%d audit rows", n)
	}
}

// A redrive shows its count first, then redrives on confirmation; without a
// selector, or with too many keys, it is refused and nothing is done.
func TestRedrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var failed []string
	for range 3 {
		k := b.claim("a", plainBody)
		b.fail("a", k)
		failed = append(failed, k)
	}
	form := url.Values{"mode": {"outcome"}, "client": {"a"}, "since": {"24h"}}
	preview := b.post(alice, "/console/redrive", form)
	if preview.status != http.StatusOK || !strings.Contains(preview.body, "3 keys would be redriven") || !strings.Contains(preview.body, "Redrive 3") {
		t.Fatalf("the preview: %d\n%s", preview.status, preview.body)
	}
	if st := b.state("a", failed[0]); st != lead.KeyFailed || len(b.audit()) != 0 {
		t.Fatal("the preview changed or recorded something")
	}
	form.Set("confirm", "yes")
	done := b.post(alice, "/console/redrive", form)
	if done.status != http.StatusOK || !strings.Contains(done.body, "3 redriven") {
		t.Fatalf("the redrive: %d\n%s", done.status, done.body)
	}
	for _, k := range failed {
		if st := b.state("a", k); st != lead.KeyProcessing {
			t.Errorf("%s is %s", k, st)
		}
	}
	// One key that does not qualify (any more): named, left as it is.
	one := b.post(alice, "/console/redrive", url.Values{"mode": {"key"}, "client": {"a"}, "key": {failed[0]}, "confirm": {"yes"}})
	if one.status != http.StatusOK || !strings.Contains(one.body, "0 redriven") || !strings.Contains(one.body, "processing") {
		t.Errorf("a key that does not qualify: %d\n%s", one.status, one.body)
	}
	for name, form := range map[string]url.Values{
		"NoSelector":  {"confirm": {"yes"}},
		"KeyNoClient": {"mode": {"key"}, "key": {failed[0]}, "confirm": {"yes"}},
		"BadSince":    {"mode": {"outcome"}, "since": {"forever"}, "confirm": {"yes"}},
	} {
		if p := b.post(alice, "/console/redrive", form); p.status != http.StatusBadRequest || !strings.Contains(p.body, "nothing was done") {
			t.Errorf("%s: %d %s", name, p.status, p.body)
		}
	}
	many := url.Values{"mode": {"key"}, "client": {"a"}, "confirm": {"yes"}}
	for range 10000 {
		many.Add("key", testkit.NewKey())
	}
	if p := b.post(alice, "/console/redrive", many); p.status != http.StatusRequestEntityTooLarge || !strings.Contains(p.body, "at most 1000") {
		t.Errorf("ten thousand keys: %d", p.status)
	}
	many = url.Values{"mode": {"key"}, "client": {"a"}, "confirm": {"yes"}}
	for range 1001 {
		many.Add("key", testkit.NewKey())
	}
	if p := b.post(alice, "/console/redrive", many); p.status != http.StatusBadRequest || !strings.Contains(p.body, "1001 keys were named at once; at most 1000") {
		t.Errorf("1001 keys: %d", p.status)
	}
	rows := b.audit()
	if len(rows) != 2 || rows[1].Actor != "alice" || rows[1].Count != 3 || rows[0].Count != 0 {
		t.Errorf("audit %+v", rows)
	}
}

// A key awaiting reconciliation is settled from its page; a key in another
// state is not, and says so.
func TestSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.claim("a", plainBody)
	d, _ := b.op.Store.ShowKey(t.Context(), "a", key)
	l, _ := b.op.Store.Lead(t.Context(), d.LeadID)
	if done, err := b.op.Store.Finish(t.Context(), &store.Finish{
		LeadID: l.ID, ClientID: "a", Key: key, From: l.KeyState.State, To: lead.KeyNeedsReconciliation, Retention: time.Hour,
		Result: &store.Result{State: lead.State{CRM: lead.CRMUncertain}},
	}); err != nil || !done.Applied {
		t.Fatalf("to reconciliation: %+v %v", done, err)
	}
	if p := b.get(alice, keyPath("a", key)); !strings.Contains(p.body, "Settle: found") {
		t.Fatal("no settle form")
	}
	if p := b.post(alice, keyPath("a", key)+"/settle", url.Values{}); p.status != http.StatusBadRequest {
		t.Errorf("settle without a choice: %d", p.status)
	}
	if p := b.post(alice, keyPath("a", key)+"/settle", url.Values{"crm_id": {"crm-77"}}); p.status != http.StatusOK || !strings.Contains(p.body, "Settled") {
		t.Fatalf("settle: %d %s", p.status, p.body)
	}
	if p := b.post(alice, keyPath("a", key)+"/settle", url.Values{"not_found": {"yes"}}); p.status != http.StatusConflict || !strings.Contains(p.body, "processing") {
		t.Errorf("a second settle: %d", p.status)
	}
	if rows := b.audit(); len(rows) != 1 || rows[0].Action != store.ActionSettle {
		t.Errorf("audit %+v", rows)
	}
}

// Wrong passwords are slowed down as the admin listener's are: fifty from
// one address, and it is answered 429 without being checked, the right
// password too, until its budget refills.
func TestWrongPasswords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	statuses := map[int]int{}
	for range 50 {
		statuses[b.get(login{"alice", "guess"}, "/console/leads").status]++
	}
	if statuses[http.StatusUnauthorized] == 0 || statuses[http.StatusTooManyRequests] < 40 || len(statuses) != 2 {
		t.Fatalf("fifty wrong passwords: %v", statuses)
	}
	if p := b.get(alice, "/console/leads"); p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") == "" {
		t.Errorf("the right password while limited: %d", p.status)
	}
	b.clock.advance(time.Minute)
	if p := b.get(alice, "/console/leads"); p.status != http.StatusOK {
		t.Errorf("the right password a minute later: %d", p.status)
	}
	// ADMIN_USER logs in as an operator of its own name.
	if p := b.get(adminLogin, "/console/leads"); p.status != http.StatusOK || !strings.Contains(p.body, "admin-user · operator") {
		t.Errorf("ADMIN_USER: %d", p.status)
	}
}

// Logins follow the clients file in force: a new file's hash or role, or a
// login gone, take effect at once, whatever was remembered.
func TestLoginsFollowTheFile(t *testing.T) {
	t.Parallel()
	set, err := callers.ParseFile([]byte(clientsFile))
	if err != nil {
		t.Fatal(err)
	}
	h := callers.NewHolder(set)
	l := console.NewLogins(h, nil)
	if role, ok := l.Check("bob", bob.password); !ok || role != operator.RoleViewer {
		t.Fatalf("bob: %s %t", role, ok)
	}
	// (Each check of a wrong pair is a bcrypt comparison, seconds under
	// the race detector: two.)
	for _, wrong := range []login{{"bob", "nope"}, {"nobody", bob.password}} {
		if _, ok := l.Check(wrong.user, wrong.password); ok {
			t.Errorf("%s with a wrong password logged in", wrong.user)
		}
	}
	promoted, err := callers.ParseFile([]byte(strings.Replace(clientsFile, "role: viewer", "role: operator", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h.Replace(promoted)
	if role, ok := l.Check("bob", bob.password); !ok || role != operator.RoleOperator {
		t.Errorf("bob after the new file: %s %t", role, ok)
	}
	gone, err := callers.ParseFile([]byte(strings.Replace(clientsFile, "  - name: bob\n", "  - name: carol\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h.Replace(gone)
	if _, ok := l.Check("bob", bob.password); ok {
		t.Error("bob logged in after the file dropped him")
	}
}

// Without ADMIN_USER and ADMIN_PASSWORD the admin listener serves no
// console, whatever login is sent.
func TestNoConsoleWithoutAdminUser(t *testing.T) {
	t.Parallel()
	holder, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := console.NewHandler(&console.Opts{Operator: &operator.Operator{Callers: holder}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(t.Context(), &admin.Opts{Gatherer: prometheus.NewRegistry(), Console: ch, ConsoleLogin: sharedLogins().Check})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/console/", "/console/leads", "/console"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.SetBasicAuth(alice.user, alice.password)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s without ADMIN_USER: %d, want 404", path, rec.Code)
		}
	}
}
