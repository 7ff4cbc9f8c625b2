package fake_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/leadintake/leadintake/downstream/fake"
)

func TestControlAPI(t *testing.T) {
	t.Parallel()

	t.Run("ScriptChaosStateReset", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		r := b.mustDo(t, http.MethodPost, "/_fake/script", `{"target":"crm_upsert","faults":[{"status":503,"retry_after":"2"},{"drop_after_apply":true},{"delay":"10ms"}]}`)
		if r.status != http.StatusNoContent {
			t.Fatalf("script: %d %s", r.status, r.body)
		}
		if r, _ := b.upsert("ref-a"); r.status != 503 || r.header.Get("Retry-After") != "2" {
			t.Errorf("first upsert: %d, want the scripted 503", r.status)
		}
		if _, err := b.upsert("ref-a"); err == nil {
			t.Error("second upsert: no error, want the scripted drop")
		}
		if r, _ := b.upsert("ref-a"); r.status != http.StatusOK {
			t.Errorf("third upsert: %d, want 200 (the drop applied the create)", r.status)
		}
		if _, err := b.notify("ref-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.notify("ref-a"); err != nil {
			t.Fatal(err)
		}

		r = b.mustDo(t, http.MethodGet, "/_fake/state", nil)
		var st fake.State
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("state %s: %v", r.body, err)
		}
		ref := st.CRM["ref-a"]
		if ref.Records != 1 || ref.Writes != 2 || ref.IdempotencyKey != "ref-a" || len(ref.IDs) != 1 {
			t.Errorf("state.crm[ref-a] = %+v", ref)
		}
		if st.Notifications["ref-a:notify"].Deliveries != 2 || st.Requests[fake.CRMUpsert] != 3 || st.Requests[fake.Notify] != 2 {
			t.Errorf("state %s", r.body)
		}
		if st.Totals != (fake.Totals{CRMRecords: 1, CRMWrites: 2, Notifications: 1, Deliveries: 2}) {
			t.Errorf("totals %+v", st.Totals)
		}
		var raw map[string]map[string]map[string]any
		if err := json.Unmarshal(r.body, &raw); err == nil {
			if _, ok := raw["crm"]["ref-a"]["last_body"]; ok {
				t.Error("state carries the lead's body")
			}
		}

		r = b.mustDo(t, http.MethodPost, "/_fake/chaos", `{"target":"all","fail_rate":1,"fail_status":500,"seed":1}`)
		if r.status != http.StatusNoContent {
			t.Fatalf("chaos: %d %s", r.status, r.body)
		}
		for _, path := range []string{"/enrichment", "/notify"} {
			if r := b.mustDo(t, http.MethodPost, path, `{}`); r.status != 500 {
				t.Errorf("%s under chaos: %d, want 500", path, r.status)
			}
		}

		if r := b.mustDo(t, http.MethodPost, "/_fake/reset", nil); r.status != http.StatusNoContent {
			t.Fatalf("reset: %d", r.status)
		}
		if st := b.fake.State(); len(st.CRM) != 0 || len(st.Requests) != 0 {
			t.Errorf("state after reset: %+v", st)
		}
		if r, _ := b.notify("ref-a"); r.status != http.StatusAccepted {
			t.Errorf("notify after reset: %d, want 202 (chaos cleared)", r.status)
		}
	})

	t.Run("RefusesBadRequests", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, c := range []struct{ path, body string }{
			{"/_fake/script", `{"target":"crm","faults":[]}`},
			{"/_fake/script", `{"target":"notify","faults":[{"stauts":503}]}`},
			{"/_fake/script", `{"target":"notify","faults":[{"status":5}]}`},
			{"/_fake/script", `{"target":"notify","faults":[{"delay":"soon"}]}`},
			{"/_fake/script", `{"target":"notify"`},
			{"/_fake/chaos", `{"target":"everything","fail_rate":0.1}`},
			{"/_fake/chaos", `{"target":"notify","fail_rate":2}`},
			{"/_fake/chaos", `{"target":"notify","delay_max":"x"}`},
		} {
			if r := b.mustDo(t, http.MethodPost, c.path, c.body); r.status != http.StatusBadRequest {
				t.Errorf("%s %s: %d, want 400", c.path, c.body, r.status)
			}
		}
		if r, _ := b.notify("ref-a"); r.status != http.StatusAccepted {
			t.Errorf("notify: %d, want 202 (nothing scripted)", r.status)
		}
	})
}

// GET /_fake/crm shows the CRM's records with the body of every write, as
// it arrived: the lead's own fields included, and what an update changed.
func TestCRMRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := lead("ref-f")
	first["fields"] = map[string]string{"budget": "10k", "team_size": "5"}
	second := lead("ref-f")
	second["fields"] = map[string]string{"budget": "50k"}
	for _, body := range []map[string]any{first, second} {
		if r := b.mustDo(t, http.MethodPut, "/crm/leads/ref-f", body, "Idempotency-Key", "ref-f"); r.status/100 != 2 {
			t.Fatalf("upsert: %d %s", r.status, r.body)
		}
	}
	r := b.mustDo(t, http.MethodGet, "/_fake/crm", nil)
	var got struct {
		Records map[string]struct {
			IDs    []string `json:"ids"`
			Writes int      `json:"writes"`
			Bodies []struct {
				Fields map[string]string `json:"fields"`
			} `json:"bodies"`
		} `json:"records"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /_fake/crm: %d %s (%v)", r.status, r.body, err)
	}
	rec := got.Records["ref-f"]
	if len(rec.IDs) != 1 || rec.Writes != 2 || len(rec.Bodies) != 2 ||
		rec.Bodies[0].Fields["team_size"] != "5" || rec.Bodies[1].Fields["budget"] != "50k" || len(rec.Bodies[1].Fields) != 1 {
		t.Errorf("GET /_fake/crm: %s", r.body)
	}
	if crm, _ := b.fake.CRM("ref-f"); len(crm.Bodies) != 2 || string(crm.LastBody) != string(crm.Bodies[1]) {
		t.Errorf("CRM(ref-f): %d bodies, the last %s", len(crm.Bodies), crm.LastBody)
	}
}
