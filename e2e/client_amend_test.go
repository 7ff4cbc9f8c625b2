package e2e

// The client's amendments (Supersedes) and its waiting (Prefer: wait)
// against the real api and worker: these need the service's side of
// "Amendments: Supersedes" and "Waiting: Prefer: wait" in the contract.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/client"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/httpfault"
)

// An enquiry is amended, the amendment's answer lost once: one CRM record,
// updated in place; the amendment's own notification; the chain shown on
// both keys; a second amendment of the same key, and one of a key never
// seen, are refused.
func TestClientAmend(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	c := s.newLeadClient(t, p.URL(), nil, client.Options{MaxWait: 5 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()

	const first = "amend-first-0001"
	res1, err := c.Submit(ctx, []byte(leadBody(401)), &client.SubmitOptions{Key: first})
	if err != nil {
		t.Fatal(err)
	}

	edited := `{"email":"edited401@example.com","source":"referral","name":"Lead 401","company":"Company 401"}`
	p.Script(http.MethodPost, "/v1/leads", httpfault.Fault{Forward: true, Drop: true})
	res2, err := c.Amend(ctx, first, []byte(edited), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Key == first || res2.Amends != res1.LeadID || res2.LeadID == res1.LeadID {
		t.Fatalf("amendment %+v of %+v", res2, res1)
	}
	var amendPosts int
	for _, r := range p.Requests() {
		if r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == res2.Key {
			amendPosts++
			if r.Header.Get("Supersedes") != first || string(r.Body) != edited {
				t.Fatalf("amendment POST: Supersedes %q body %s", r.Header.Get("Supersedes"), r.Body)
			}
		}
	}
	if amendPosts < 2 {
		t.Fatalf("%d amendment POSTs, want the dropped one and its retry", amendPosts)
	}

	ref := intake.ExternalRef("e2e", first)
	rec, ok := s.fake.CRM(ref)
	if !ok || rec.Records != 1 || rec.Writes != 2 || !strings.Contains(string(rec.LastBody), "edited401@example.com") ||
		rec.IdempotencyKey != ref+":amend:1" {
		t.Fatalf("CRM %+v (%s)", rec, rec.LastBody)
	}
	for _, key := range []string{ref + ":notify", ref + ":notify:1"} {
		if n, ok := s.fake.Notification(key); !ok || n.Deliveries != 1 {
			t.Fatalf("notification %s: %+v", key, n)
		}
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 2 {
		t.Fatalf("%d leads, want 2 (the enquiry and its amendment)", n)
	}

	op1, err := c.Status(ctx, first)
	if err != nil || op1.SupersededBy != res2.Key || op1.Supersedes != "" {
		t.Fatalf("status of the first key: %+v, %v", op1, err)
	}
	op2, err := c.Status(ctx, res2.Key)
	if err != nil || op2.Supersedes != first || op2.SupersededBy != "" {
		t.Fatalf("status of the amendment: %+v, %v", op2, err)
	}

	var refused *client.APIError
	if _, err := c.Amend(ctx, first, []byte(leadBody(402)), nil); !errors.As(err, &refused) ||
		refused.StatusCode != http.StatusConflict || refused.Code != client.CodeAlreadySuperseded {
		t.Fatalf("second amendment of %s: %v", first, err)
	}
	if _, err := c.Amend(ctx, "never-seen-key-01", []byte(leadBody(403)), nil); !errors.As(err, &refused) ||
		refused.StatusCode != http.StatusUnprocessableEntity || refused.Code != client.CodeSupersedesUnknown {
		t.Fatalf("amendment of an unknown key: %v", err)
	}
}

// The article's case: the outcome of an enquiry is unknown (the client gave
// up while the CRM was slow), the visitor edits it, and the edit goes as an
// amendment of the unknown key. The amendment waits for the first enquiry,
// and the CRM ends with one record holding the edit.
func TestClientAmendAfterUnknownOutcome(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	s.fake.Script(fake.CRMUpsert, fake.Fault{Delay: 3 * time.Second})
	c := s.newLeadClient(t, p.URL(), nil, client.Options{MaxWait: 5 * time.Second})

	short, cancelShort := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	_, err := c.Submit(short, []byte(leadBody(411)), nil)
	cancelShort()
	var unknown *client.OutcomeUnknownError
	if !errors.As(err, &unknown) || !unknown.Accepted {
		t.Fatalf("first submission: %v, want an accepted enquiry with an unknown outcome", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()
	edited := `{"email":"edited411@example.com","source":"referral"}`
	res, err := c.Amend(ctx, unknown.Key, []byte(edited), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Amends != unknown.LeadID {
		t.Fatalf("amendment %+v: amends %q, want %s", res, res.Amends, unknown.LeadID)
	}
	rec, ok := s.fake.CRM(intake.ExternalRef("e2e", unknown.Key))
	if !ok || rec.Records != 1 || !strings.Contains(string(rec.LastBody), "edited411@example.com") {
		t.Fatalf("CRM %+v (%s)", rec, rec.LastBody)
	}
	if st := s.fake.State(); st.Totals.CRMRecords != 1 || st.Totals.DuplicateRefs != 0 {
		t.Fatalf("CRM totals %+v", st.Totals)
	}
}

// A server that honours Prefer: wait holds the POST until the lead
// finishes and answers its final response at once; a Wait on an unfinished
// key is held too: no polling at the pace of Retry-After.
func TestClientPreferWait(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	s.fake.Script(fake.CRMUpsert, fake.Fault{Delay: 2 * time.Second}, fake.Fault{Delay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()

	waiting := s.newLeadClient(t, p.URL(), nil, client.Options{MaxWait: 10 * time.Second})
	body := leadBody(421)
	res, err := waiting.Submit(ctx, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, posts := requireSameRequest(t, p, body)
	post := posts[0]
	if len(posts) != 1 || post.Header.Get("Prefer") != "wait=10" || post.Status != http.StatusCreated ||
		post.ResponseHeader.Get("Preference-Applied") != "wait=10" || post.ResponseHeader.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("POSTs %+v: want one, held until its final response", posts)
	}
	requireExactlyOnce(t, s, res.Key, res)

	// Submitted without waiting, then waited for.
	notWaiting := s.newLeadClient(t, s.apiURL, nil, client.Options{MaxWait: -1})
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = notWaiting.Submit(short, []byte(leadBody(422)), nil)
	cancelShort()
	var unknown *client.OutcomeUnknownError
	if !errors.As(err, &unknown) || !unknown.Accepted {
		t.Fatalf("submission: %v, want accepted and unfinished", err)
	}
	before := len(p.Requests())
	res, err = waiting.Wait(ctx, unknown.Key)
	if err != nil || res.Key != unknown.Key {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	gets := p.Requests()[before:]
	if len(gets) != 1 || gets[0].Header.Get("Prefer") != "wait=10" || gets[0].ResponseHeader.Get("Preference-Applied") != "wait=10" {
		t.Fatalf("polls %+v: want one, held", gets)
	}
}

// The command line amends with --supersedes.
func TestCLIAmend(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	if r := s.cli(p.URL(), leadBody(431), "submit", "--key", "cli-amend-first-1"); r.code != 0 {
		t.Fatalf("submit: exit %d: %s", r.code, r.stderr)
	}
	r := s.cli(p.URL(), `{"email":"edited431@example.com","source":"referral"}`, "submit", "--supersedes", "cli-amend-first-1")
	if r.code != 0 || !strings.Contains(r.stdout, `"amends":"`) {
		t.Fatalf("amend: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r = s.cli(p.URL(), leadBody(432), "submit", "--supersedes", "cli-amend-first-1"); r.code != 1 || !strings.Contains(r.stdout, "already_superseded") {
		t.Fatalf("second amendment: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
