package fake_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/leadintake/leadintake/downstream/fake"
)

func TestEnrichment(t *testing.T) {
	t.Parallel()

	enrich := func(email string) map[string]any {
		return map[string]any{"lead_id": "l1", "email": email, "company": "Acme", "website": "https://acme.test"}
	}

	t.Run("SameDomainSameAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		r1 := b.mustDo(t, http.MethodPost, "/enrichment", enrich("ada@Acme.test"))
		r2 := b.mustDo(t, http.MethodPost, "/enrichment", enrich("bob@acme.test"))
		if r1.status != http.StatusOK || r2.status != http.StatusOK {
			t.Fatalf("statuses %d, %d; want 200", r1.status, r2.status)
		}
		if string(r1.body) != string(r2.body) {
			t.Errorf("answers differ for one domain:\n%s\n%s", r1.body, r2.body)
		}
		var got fake.EnrichmentAnswer
		if err := json.Unmarshal(r1.body, &got); err != nil {
			t.Fatal(err)
		}
		want, ok := fake.EnrichmentFor("acme.test")
		if !ok || got != want {
			t.Errorf("answer %+v; EnrichmentFor says %+v, %v", got, want, ok)
		}
		if got.CompanySize <= 0 || got.Industry == "" || got.Seniority == "" || got.Country == "" {
			t.Errorf("answer %+v lacks a member", got)
		}
		m := r1.json(t)
		if _, ok := m["meta"]; !ok {
			t.Errorf("answer %s lacks the unknown member that clients must ignore", r1.body)
		}
		if n := b.fake.EnrichmentCalls(); n != 2 {
			t.Errorf("EnrichmentCalls = %d, want 2", n)
		}
	})

	t.Run("NoDataDomainIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		r := b.mustDo(t, http.MethodPost, "/enrichment", enrich("x@acme.nodata"))
		if r.status != http.StatusNotFound {
			t.Fatalf("status %d, want 404", r.status)
		}
		if _, ok := fake.EnrichmentFor("acme.nodata"); ok {
			t.Error("EnrichmentFor has data for a .nodata domain")
		}
		if n := b.fake.EnrichmentCalls(); n != 1 {
			t.Errorf("EnrichmentCalls = %d, want 1", n)
		}
	})

	t.Run("BadRequests", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, body := range []any{"{not json", `[1]`, enrich("no-at-sign")} {
			if r := b.mustDo(t, http.MethodPost, "/enrichment", body); r.status != http.StatusBadRequest {
				t.Errorf("body %v: status %d, want 400", body, r.status)
			}
		}
		if n := b.fake.EnrichmentCalls(); n != 0 {
			t.Errorf("EnrichmentCalls = %d, want 0", n)
		}
		if n := b.fake.Requests(fake.Enrichment); n != 3 {
			t.Errorf("Requests(Enrichment) = %d, want 3", n)
		}
	})
}

func TestCRMUpsert(t *testing.T) {
	t.Parallel()

	t.Run("CreatesThenUpdates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		r1 := b.mustDo(t, http.MethodPut, "/crm/leads/ref-a", lead("ref-a"), "Idempotency-Key", "ref-a")
		if r1.status != http.StatusCreated || r1.json(t)["id"] != "crm_000001" {
			t.Fatalf("first write: %d %s, want 201 crm_000001", r1.status, r1.body)
		}
		body := lead("ref-a")
		body["score"] = 60
		r2 := b.mustDo(t, http.MethodPut, "/crm/leads/ref-a", body, "Idempotency-Key", "ref-a")
		if r2.status != http.StatusOK || r2.json(t)["id"] != "crm_000001" {
			t.Fatalf("second write: %d %s, want 200 crm_000001", r2.status, r2.body)
		}
		rec, ok := b.fake.CRM("ref-a")
		if !ok || rec.Records != 1 || rec.Writes != 2 || rec.IdempotencyKey != "ref-a" {
			t.Fatalf("CRM(ref-a) = %+v, %v; want 1 record, 2 writes, key ref-a", rec, ok)
		}
		var last struct {
			Score       int            `json:"score"`
			Tier        string         `json:"tier"`
			ExternalRef string         `json:"external_ref"`
			Enrichment  map[string]any `json:"enrichment"`
		}
		if err := json.Unmarshal(rec.LastBody, &last); err != nil {
			t.Fatal(err)
		}
		if last.Score != 60 || last.Tier != "hot" || last.ExternalRef != "ref-a" || last.Enrichment["industry"] != "software" {
			t.Errorf("last body %s", rec.LastBody)
		}

		r3 := b.mustDo(t, http.MethodPut, "/crm/leads/ref-b", lead("ref-b"), "Idempotency-Key", "ref-b")
		if r3.status != http.StatusCreated || r3.json(t)["id"] != "crm_000002" {
			t.Errorf("other ref: %d %s, want 201 crm_000002", r3.status, r3.body)
		}
	})

	t.Run("RefusesBadRequests", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		noRef := lead("x")
		delete(noRef, "external_ref")
		for name, c := range map[string]struct {
			body any
			key  string
		}{
			"BadJSON":        {"{", "ref-a"},
			"NotAnObject":    {"[]", "ref-a"},
			"NoExternalRef":  {noRef, "ref-a"},
			"OtherRefInBody": {lead("ref-b"), "ref-a"},
			"NoKey":          {lead("ref-a"), ""},
			"OtherKey":       {lead("ref-a"), "ref-a:x"},
		} {
			r := b.mustDo(t, http.MethodPut, "/crm/leads/ref-a", c.body, "Idempotency-Key", c.key)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", name, r.status)
			}
		}
		if st := b.fake.State(); len(st.CRM) != 0 {
			t.Errorf("refused writes left records: %+v", st.CRM)
		}
	})
}

func TestCRMCreate(t *testing.T) {
	t.Parallel()

	t.Run("EveryPostIsANewRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for i, want := range []string{"crm_000001", "crm_000002"} {
			r, err := b.create("ref-a")
			if err != nil {
				t.Fatal(err)
			}
			if r.status != http.StatusCreated || r.json(t)["id"] != want {
				t.Fatalf("POST %d: %d %s, want 201 %s", i, r.status, r.body, want)
			}
		}
		rec, _ := b.fake.CRM("ref-a")
		if rec.Records != 2 || rec.Writes != 2 || rec.IDs[0] != "crm_000001" {
			t.Errorf("CRM(ref-a) = %+v; want the duplicate to show", rec)
		}
		if st := b.fake.State(); st.Totals.DuplicateRefs != 1 || st.Totals.CRMRecords != 2 {
			t.Errorf("totals %+v; want 1 duplicate ref, 2 records", st.Totals)
		}
		if r := b.mustDo(t, http.MethodPost, "/crm/leads", "{"); r.status != http.StatusBadRequest {
			t.Errorf("bad JSON: status %d, want 400", r.status)
		}
	})

	t.Run("CreateConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &fake.Options{CreateConflict: true})
		r1, err := b.create("ref-a")
		if err != nil || r1.status != http.StatusCreated {
			t.Fatalf("first POST: %v %v", r1.status, err)
		}
		r2, err := b.create("ref-a")
		if err != nil || r2.status != http.StatusConflict {
			t.Fatalf("second POST: %v %v, want 409", r2.status, err)
		}
		if rec, _ := b.fake.CRM("ref-a"); rec.Records != 1 || rec.Writes != 1 {
			t.Errorf("CRM(ref-a) = %+v; want 1 record, 1 write", rec)
		}
	})
}

func TestCRMLookup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if r := b.mustDo(t, http.MethodGet, "/crm/leads?external_ref=ref-a", nil); r.status != http.StatusNotFound || r.json(t)["error"] != "not found" {
		t.Errorf("unknown ref: %d %s, want 404", r.status, r.body)
	}
	if _, err := b.create("ref-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.create("ref-a"); err != nil {
		t.Fatal(err)
	}
	if r := b.mustDo(t, http.MethodGet, "/crm/leads?external_ref=ref-a", nil); r.status != http.StatusOK || r.json(t)["id"] != "crm_000001" {
		t.Errorf("known ref: %d %s, want 200 with the first record", r.status, r.body)
	}
	if r := b.mustDo(t, http.MethodGet, "/crm/leads", nil); r.status != http.StatusBadRequest {
		t.Errorf("no external_ref: %d, want 400", r.status)
	}
	if n := b.fake.Requests(fake.CRMLookup); n != 3 {
		t.Errorf("Requests(CRMLookup) = %d, want 3", n)
	}
}

func TestNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r1, err := b.notify("ref-a")
	if err != nil || r1.status != http.StatusAccepted {
		t.Fatalf("first delivery: %v %v, want 202", r1.status, err)
	}
	r2, err := b.notify("ref-a")
	if err != nil || r2.status != http.StatusOK {
		t.Fatalf("repeat: %v %v, want 200", r2.status, err)
	}
	n, ok := b.fake.Notification("ref-a:notify")
	if !ok || n.Deliveries != 2 {
		t.Fatalf("Notification = %+v, %v; want 2 deliveries", n, ok)
	}
	var first struct {
		ExternalRef string `json:"external_ref"`
		Tier        string `json:"tier"`
	}
	if err := json.Unmarshal(n.FirstBody, &first); err != nil || first.ExternalRef != "ref-a" || first.Tier != "hot" {
		t.Errorf("first body %s: %v", n.FirstBody, err)
	}
	if st := b.fake.State(); st.Totals.Notifications != 1 || st.Totals.Deliveries != 2 {
		t.Errorf("totals %+v; want 1 notification, 2 deliveries", st.Totals)
	}

	if r := b.mustDo(t, http.MethodPost, "/notify", `{"external_ref":"ref-b"}`); r.status != http.StatusBadRequest {
		t.Errorf("no Idempotency-Key: %d, want 400", r.status)
	}
	if r := b.mustDo(t, http.MethodPost, "/notify", `nope`, "Idempotency-Key", "ref-b:notify"); r.status != http.StatusBadRequest {
		t.Errorf("bad JSON: %d, want 400", r.status)
	}
	if _, ok := b.fake.Notification("ref-b:notify"); ok {
		t.Error("a refused notification was recorded")
	}
}

func TestBearerTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, &fake.Options{EnrichmentToken: "e-tok", CRMToken: "c-tok", NotifyToken: "n-tok"})
	enrich := map[string]any{"email": "a@acme.test"}
	notify := map[string]any{"external_ref": "ref-a"}
	for _, c := range []struct {
		name, method, path string
		body               any
		token              string
		want               int
	}{
		{"EnrichmentWithout", "POST", "/enrichment", enrich, "", 401},
		{"EnrichmentWrong", "POST", "/enrichment", enrich, "c-tok", 401},
		{"EnrichmentRight", "POST", "/enrichment", enrich, "e-tok", 200},
		{"UpsertWithout", "PUT", "/crm/leads/ref-a", lead("ref-a"), "", 401},
		{"UpsertRight", "PUT", "/crm/leads/ref-a", lead("ref-a"), "c-tok", 201},
		{"CreateWithout", "POST", "/crm/leads", lead("ref-b"), "", 401},
		{"LookupWithout", "GET", "/crm/leads?external_ref=ref-a", nil, "", 401},
		{"LookupRight", "GET", "/crm/leads?external_ref=ref-a", nil, "c-tok", 200},
		{"NotifyWithout", "POST", "/notify", notify, "", 401},
		{"NotifyRight", "POST", "/notify", notify, "n-tok", 202},
	} {
		headers := []string{"Idempotency-Key", "ref-a"}
		if c.path == "/notify" {
			headers = []string{"Idempotency-Key", "ref-a:notify"}
		}
		if c.token != "" {
			headers = append(headers, "Authorization", "Bearer "+c.token)
		}
		r := b.mustDo(t, c.method, c.path, c.body, headers...)
		if r.status != c.want {
			t.Errorf("%s: status %d, want %d", c.name, r.status, c.want)
		}
	}
	if st := b.fake.State(); st.Totals.CRMRecords != 1 || st.Totals.Deliveries != 1 || st.EnrichmentCalls != 1 {
		t.Errorf("unauthorized requests were applied: %+v", st)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.upsert("ref-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.notify("ref-a"); err != nil {
		t.Fatal(err)
	}
	b.fake.Script(fake.CRMUpsert, fake.Fault{Status: 500})
	if err := b.fake.SetChaos(fake.Notify, fake.Chaos{FailRate: 1}); err != nil {
		t.Fatal(err)
	}
	b.fake.Reset()
	st := b.fake.State()
	if len(st.CRM) != 0 || len(st.Notifications) != 0 || len(st.Requests) != 0 || st.EnrichmentCalls != 0 {
		t.Fatalf("state after Reset: %+v", st)
	}
	if r, err := b.upsert("ref-a"); err != nil || r.status != http.StatusCreated || r.json(t)["id"] != "crm_000001" {
		t.Errorf("upsert after Reset: %v %s, want 201 crm_000001 (no fault, ids restart)", err, r.body)
	}
	if r, err := b.notify("ref-a"); err != nil || r.status != http.StatusAccepted {
		t.Errorf("notify after Reset: %v %v, want 202 (no chaos)", err, r.status)
	}
}
