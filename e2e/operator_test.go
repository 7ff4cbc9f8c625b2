package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
)

// command runs `api args...` against the stack's database, as an operator
// does.
func (s *stack) command(args ...string) ran {
	s.t.Helper()
	sum := "API_CLIENTS=e2e=" + strings.Repeat("0", 64)
	return runBinary(s.t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, sum}, args...)
}

// postErasure POSTs an erasure to the admin listener at admin with the
// headers given.
func postErasure(t *testing.T, admin string, auth basicAuth, body string, header map[string]string) *response {
	t.Helper()
	return postAdmin(t, admin+"/admin/erasures", auth, body, header)
}

// postAdmin POSTs a JSON body to url on an admin listener, with basic auth
// (none when auth is zero) and the headers given.
func postAdmin(t *testing.T, url string, auth basicAuth, body string, header map[string]string) *response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != (basicAuth{}) {
		req.SetBasicAuth(auth.user, auth.password)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: buf.Bytes()}
}

// Erasure on request, by `api erase` and by POST /admin/erasures: every
// lead of the address (another spelling of it too) loses its personal
// data, whatever its state; an unfinished one is finished as 422 erased,
// its key replays that, and the worker never calls downstream for it; a
// finished one keeps its stored response. Each request is recorded,
// without the address.
func TestErasure(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI("ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	admin := adminURL(t, api)
	worker := s.startWorker()

	const (
		ada      = `{"email":"ada@example.com","source":"referral","name":"Ada Lovelace","phone":"+44 20 7946 0001"}`
		adaAgain = `{"email":"Ada@Example.COM","source":"website","name":"Ada L.","message":"call me back"}`
		grace    = `{"email":"grace@example.com","source":"website","name":"Grace Hopper"}`
		lin      = `{"email":"lin@example.com","source":"website","name":"Lin"}`
	)
	keyA, keyB, keyG, keyL := "erase-key-0001", "erase-key-0002", "erase-key-0003", "erase-key-0004"
	for key, body := range map[string]string{keyA: ada, keyG: grace} {
		if r := s.submit(key, body); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		s.waitState(key, time.Minute, "completed")
	}
	finishedA := s.submit(keyA, ada)

	// The next two wait: no worker runs.
	if err := worker.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	for key, body := range map[string]string{keyB: adaAgain, keyL: lin} {
		if r := s.submit(key, body); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
	}

	r := s.command("erase", "--client", "e2e", "--email", "ADA@example.com")
	if r.code != 0 || r.stdout != "erased 2\n" {
		t.Fatalf("api erase: exit %d\nstdout: %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Nothing is left of the address: again, 0, and still exit 0.
	r = s.command("erase", "--json", "--client", "e2e", "--email", "ada@example.com")
	var out map[string]int
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out) != 1 || out["erased"] != 0 {
		t.Fatalf("api erase --json: exit %d\nstdout: %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// The unfinished lead is finished as failed, 422 erased, and its key
	// replays that; the finished one replays what it stored.
	op := s.waitState(keyB, time.Second, "failed")
	if op.Response.Status != http.StatusUnprocessableEntity || !strings.Contains(string(op.Response.Body), `"code":"erased"`) {
		t.Fatalf("the unfinished key after the erasure: %d %s", op.Response.Status, op.Response.Body)
	}
	if again := s.submit(keyB, adaAgain); again.status != http.StatusUnprocessableEntity || !bytes.Equal(again.body, op.Response.Body) {
		t.Fatalf("replay of the erased lead's key: %d %s, want the stored 422 %s", again.status, again.body, op.Response.Body)
	}
	if again := s.submit(keyA, ada); again.status != finishedA.status || !bytes.Equal(again.body, finishedA.body) {
		t.Fatalf("replay of a finished erased lead's key: %d %s, want %d %s", again.status, again.body, finishedA.status, finishedA.body)
	}

	// The admin listener: basic auth, browsers' cross-site requests
	// refused, bad bodies told.
	body := `{"client_id":"e2e","email":"grace@example.com"}`
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}} {
		if got := postErasure(t, admin, operator, body, h); got.status != http.StatusForbidden {
			t.Errorf("cross-site erasure %v: %d, want 403", h, got.status)
		}
	}
	if got := postErasure(t, admin, basicAuth{}, body, nil); got.status != http.StatusUnauthorized {
		t.Errorf("erasure without credentials: %d, want 401", got.status)
	}
	if got := postErasure(t, admin, operator, `{"client_id":"e2e","email":"not an address"}`, nil); got.status != http.StatusUnprocessableEntity {
		t.Errorf("erasure of a non-address: %d %s, want 422", got.status, got.body)
	}
	if got := postErasure(t, admin, operator, `{"client":"e2e"}`, nil); got.status != http.StatusBadRequest {
		t.Errorf("erasure with a bad body: %d %s, want 400", got.status, got.body)
	}
	if s.count(`SELECT count(*) FROM leads WHERE erased_at IS NOT NULL`) != 2 {
		t.Fatal("a refused erasure erased something")
	}
	got := postErasure(t, admin, operator, body, nil)
	if got.status != http.StatusOK || strings.TrimSpace(string(got.body)) != `{"erased":1}` {
		t.Fatalf("POST /admin/erasures: %d %s", got.status, got.body)
	}

	// The worker starts again: the other waiting lead is processed, the
	// erased one never reaches downstream.
	s.startWorker()
	s.waitState(keyL, time.Minute, "completed")
	if _, ok := s.fake.CRM(intake.ExternalRef("e2e", keyB)); ok {
		t.Error("the erased unfinished lead reached the CRM")
	}
	if n := s.fake.Requests(fake.CRMUpsert); n != 3 {
		t.Errorf("%d CRM requests, want 3 (ada's first, grace's, lin's)", n)
	}

	// What stays: the erasure records (no address), the erased leads'
	// facts; personal data nowhere in the erased leads, the records, or
	// the jobs.
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'erase' AND client_id = 'e2e'`); n != 3 {
		t.Errorf("%d erasure records, want 3 (two commands, one admin request)", n)
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'erase' AND via = 'admin_api' AND actor = 'admin' AND count = 1`); n != 1 {
		t.Errorf("%d admin erasure records of one lead, want 1", n)
	}
	for _, q := range []string{
		// (Whole values only: ids and times are hex and digits, and may
		// hold "ada" or "7946" by chance.)
		`SELECT count(*) FROM audit e WHERE row_to_json(e)::text ~* '(ada@example|grace@example)'`,
		`SELECT count(*) FROM leads l WHERE erased_at IS NOT NULL AND row_to_json(l)::text ~* '(ada@example|grace@example|lovelace|hopper|\+44 20 7946 0001|call me back)'`,
		`SELECT count(*) FROM river_job j WHERE row_to_json(j)::text ~* '(ada@example|grace@example|lovelace|hopper)'`,
	} {
		if n := s.count(q); n != 0 {
			t.Errorf("%s: %d rows hold personal data after the erasure", q, n)
		}
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE erased_at IS NOT NULL AND external_ref <> '' AND client_id = 'e2e'`); n != 3 {
		t.Errorf("%d erased leads keep their reference, want 3", n)
	}
	for _, line := range api.Lines() {
		if strings.Contains(strings.ToLower(line), "@example.com") {
			t.Errorf("the api logged an address: %s", line)
		}
	}
}

// Operator commands used wrongly exit 2 with the usage on stderr; -h
// prints it and exits 0.
func TestOperatorCommandUsage(t *testing.T) {
	t.Parallel()
	env := []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1", piiHashKey}
	for _, args := range [][]string{
		{"erase", "--client", "e2e"},
		{"erase", "--email", "ada@example.com"},
		{"erase", "--client", "e2e", "--email", "ada@example.com", "extra"},
		{"erase", "--colour"},
		{"keys"},
		{"keys", "purge"},
		{"keys", "list", "--state", "stuck"},
		{"keys", "show", "some-key"},
		{"keys", "show", "--client", "e2e"},
		{"keys", "settle", "--client", "e2e", "some-key"},
		{"keys", "settle", "--client", "e2e", "some-key", "--crm-id", "crm_1", "--not-found"},
	} {
		r := runBinary(t, "api", env, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "usage: api ") || r.stdout != "" {
			t.Errorf("api %v: exit %d, want 2 and the usage\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"erase", "-h"}, {"keys", "list", "--help"}} {
		if r := runBinary(t, "api", env, args...); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: api ") {
			t.Errorf("api %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// keyReport is `api keys show --json`, the part the tests read.
type keyReport struct {
	ClientID       string  `json:"client_id"`
	Key            string  `json:"key"`
	State          string  `json:"state"`
	LeadID         string  `json:"lead_id"`
	CRM            string  `json:"crm"`
	CRMID          string  `json:"crm_id"`
	Notification   string  `json:"notification"`
	ResponseStatus *int    `json:"response_status"`
	FailureCode    *string `json:"failure_code"`
	Attempts       int     `json:"attempts"`
	LastError      string  `json:"last_error"`
}

// Keys awaiting reconciliation, as an operator finds, reads and settles
// them: `api keys list` (table and --json, filters), `api keys show`, and
// `api keys settle` with the record found (the lead resumes at its
// notification) or none (posted again); a settle of a key in another state
// changes nothing and exits 1 naming it.
func TestKeysCommands(t *testing.T) {
	t.Parallel()
	s := newStack(t, &stackOpts{workerEnv: []string{"CRM_MODE=create", "RECONCILE_INTERVAL=1h"}})
	s.startAPI("JOB_MAX_ATTEMPTS=2")
	s.startWorker()
	// The first post is applied and its answer lost, the second fails;
	// every look-up fails, the reconciler's too: the keys wait for the
	// operator.
	s.fake.Script(fake.CRMCreate, fake.Fault{DropAfterApply: true}, fake.Fault{Status: http.StatusServiceUnavailable})
	if err := s.fake.SetChaos(fake.CRMLookup, fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	found, missing := "keys-found-0001", "keys-missing-0001"
	for i, key := range []string{found, missing} {
		if r := s.submit(key, leadBody(900+i)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		s.waitState(key, time.Minute, "needs_reconciliation")
	}
	done := "keys-done-0001"
	s.submit(done, leadBody(902))
	s.waitState(done, time.Minute, "completed")

	// list: the table, the filters, --json.
	r := s.command("keys", "list", "--state", "needs_reconciliation")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "CLIENT") ||
		!strings.Contains(lines[1], found) || !strings.Contains(lines[2], missing) {
		t.Fatalf("keys list: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var listed []map[string]any
	r = s.command("keys", "list", "--json", "--client", "e2e")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed) != 3 {
		t.Fatalf("keys list --json: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"keys", "list", "--json", "--older-than", "1h"},
		{"keys", "list", "--json", "--client", "another"},
	} {
		if r = s.command(args...); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("%v: exit %d, stdout %q, want []", args, r.code, r.stdout)
		}
	}

	// show: the steps, the job, the last error; no personal data.
	var rep keyReport
	r = s.command("keys", "show", found, "--client", "e2e", "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("keys show --json: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if rep.State != "needs_reconciliation" || rep.CRM != "uncertain" || rep.Attempts != 2 || rep.LastError == "" || rep.ResponseStatus != nil {
		t.Errorf("keys show: %+v", rep)
	}
	r = s.command("keys", "show", "--client", "e2e", found)
	if r.code != 0 || !strings.Contains(r.stdout, "needs_reconciliation") || !strings.Contains(r.stdout, "uncertain") {
		t.Errorf("keys show: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, pii := range []string{"lead900@", "Lead 900", "Company 900", "7946"} {
		if strings.Contains(r.stdout, pii) {
			t.Errorf("keys show prints %q:\n%s", pii, r.stdout)
		}
	}

	// settle, found: the lead resumes at its notification, with the
	// operator's CRM id.
	crm, _ := s.fake.CRM(intake.ExternalRef("e2e", found))
	r = s.command("keys", "settle", "--client", "e2e", found, "--crm-id", crm.IDs[0])
	if r.code != 0 {
		t.Fatalf("keys settle --crm-id: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	op := s.waitState(found, time.Minute, "completed")
	if !strings.Contains(string(op.Response.Body), `"crm_id":"`+crm.IDs[0]+`"`) {
		t.Errorf("settled key's response %s, want crm_id %s", op.Response.Body, crm.IDs[0])
	}
	// settle, not found: the lead is posted again.
	posts := s.fake.Requests(fake.CRMCreate)
	if r = s.command("keys", "settle", missing, "--client", "e2e", "--not-found", "--json"); r.code != 0 {
		t.Fatalf("keys settle --not-found: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	s.waitState(missing, time.Minute, "completed")
	if n := s.fake.Requests(fake.CRMCreate); n != posts+1 {
		t.Errorf("%d posts after the settle, want 1", n-posts)
	}

	// A key in another state: nothing changes, exit 1 naming the state.
	before := s.operation(done)
	r = s.command("keys", "settle", "--client", "e2e", done, "--not-found")
	if r.code != 1 || !strings.Contains(r.stderr, "completed") {
		t.Errorf("settle of a completed key: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if after := s.operation(done); !bytes.Equal(before.body, after.body) {
		t.Errorf("a refused settle changed the key:\n%s\n%s", before.body, after.body)
	}
	// The two settles are in the audit, by the command line; the refused
	// one is not.
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'settle' AND actor = 'cli' AND via = 'cli' AND count = 1`); n != 2 {
		t.Errorf("%d settles recorded, want 2", n)
	}
	if r = s.command("keys", "show", "--client", "e2e", "no-such-key-0001"); r.code != 1 || !strings.Contains(r.stderr, "no such key") {
		t.Errorf("show of an unknown key: exit %d\nstderr: %s", r.code, r.stderr)
	}
}

// An erasure for a client that is not in force, by `api erase` or POST
// /admin/erasures, is refused with one clear line or code, erases and
// records nothing, and the id it named appears in no log line.
func TestErasureOfAnUnknownClient(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI("ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	const ghost = "ghost-Zq81xVb0"
	if r := s.submit("unknown-client-0001", `{"email":"ada@example.com","source":"website"}`); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}

	r := s.command("erase", "--client", ghost, "--email", "ada@example.com")
	line := strings.TrimSuffix(r.stderr, "\n")
	if r.code == 0 || line == "" || strings.Contains(line, "\n") || !strings.Contains(line, "--client") || r.stdout != "" {
		t.Fatalf("api erase --client %s: exit %d, stdout %q, stderr %q; want non-zero and one line naming --client", ghost, r.code, r.stdout, r.stderr)
	}
	got := postErasure(t, adminURL(t, api), operator, `{"client_id":"`+ghost+`","email":"ada@example.com"}`, nil)
	if got.status != http.StatusUnprocessableEntity || !strings.Contains(string(got.body), `"code":"unknown_client"`) {
		t.Fatalf("POST /admin/erasures for %s: %d %s, want 422 unknown_client", ghost, got.status, got.body)
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'erase'`); n != 0 {
		t.Errorf("%d erasures recorded for an unknown client, want none", n)
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE erased_at IS NOT NULL`); n != 0 {
		t.Errorf("%d leads erased", n)
	}
	if strings.Contains(api.Output(), ghost) {
		t.Errorf("the api's log names the unknown client:\n%s", api.Output())
	}
	// The client in force is erased as ever.
	r = s.command("erase", "--client", "e2e", "--email", "ada@example.com")
	if r.code != 0 || r.stdout != "erased 1\n" {
		t.Fatalf("api erase --client e2e: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
