package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/store"
)

// Both /metrics answer in the Prometheus text format with leadintake's
// series, and the counters move with a submission.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI()
	worker := s.startWorker()
	apiMetrics, workerMetrics := adminURL(t, api)+"/metrics", adminURL(t, worker)+"/metrics"

	before := scrape(t, apiMetrics, basicAuth{})
	for _, outcome := range []string{"claimed", "replayed", "in_progress", "mismatch", "refused", "unavailable"} {
		if _, ok := before.value("leadintake_submissions_total", map[string]string{"outcome": outcome}); !ok {
			t.Errorf("api: no leadintake_submissions_total{outcome=%q}", outcome)
		}
	}
	for _, state := range []string{string(store.KeyProcessing), string(store.KeyCompleted), string(store.KeyFailed), string(store.KeyNeedsReconciliation)} {
		if _, ok := before.value("leadintake_keys", map[string]string{"state": state}); !ok {
			t.Errorf("api: no leadintake_keys{state=%q}", state)
		}
	}
	if _, ok := before.value("leadintake_oldest_processing_key_age_seconds", nil); !ok {
		t.Errorf("api: no leadintake_oldest_processing_key_age_seconds")
	}
	claimed0, _ := before.value("leadintake_submissions_total", map[string]string{"outcome": "claimed"})
	replayed0, _ := before.value("leadintake_submissions_total", map[string]string{"outcome": "replayed"})
	mismatch0, _ := before.value("leadintake_submissions_total", map[string]string{"outcome": "mismatch"})
	refused0, _ := before.value("leadintake_submissions_total", map[string]string{"outcome": "refused"})

	const key = "metrics-key-0001"
	if r := s.submit(key, leadBody(3)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	s.waitState(key, time.Minute, string(store.KeyCompleted))
	if r := s.submit(key, leadBody(3)); r.status != http.StatusCreated {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if r := s.submit(key, leadBody(4)); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("mismatch: %d %s", r.status, r.body)
	}
	if r := s.submit("metrics-key-0002", `{"email":"not an address","source":"referral"}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid lead: %d %s", r.status, r.body)
	}

	after := scrape(t, apiMetrics, basicAuth{})
	for outcome, want := range map[string]float64{"claimed": claimed0 + 1, "replayed": replayed0 + 1, "mismatch": mismatch0 + 1, "refused": refused0 + 1} {
		if got, _ := after.value("leadintake_submissions_total", map[string]string{"outcome": outcome}); got != want {
			t.Errorf("api: leadintake_submissions_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if n, ok := after.value("leadintake_http_request_duration_seconds", map[string]string{"route": "/v1/leads", "method": "POST"}); !ok || n < 4 {
		t.Errorf("api: leadintake_http_request_duration_seconds{route=/v1/leads,method=POST} count %v, want at least 4", n)
	}
	if fam := after["leadintake_http_request_duration_seconds"]; fam == nil || fam.GetType().String() != "HISTOGRAM" {
		t.Errorf("api: leadintake_http_request_duration_seconds is not a histogram: %v", fam)
	}
	// The key gauges are read from the database, at most every 10 s.
	eventually(t, time.Minute, "leadintake_keys{state=completed} reaches 1", func() bool {
		v, _ := scrape(t, apiMetrics, basicAuth{}).value("leadintake_keys", map[string]string{"state": string(store.KeyCompleted)})
		return v == 1
	})

	var w metrics
	eventually(t, time.Minute, "the worker counts the finished lead", func() bool {
		w = scrape(t, workerMetrics, basicAuth{})
		v, _ := w.value("leadintake_leads_finished_total", map[string]string{"outcome": "completed"})
		return v == 1
	})
	for _, target := range []string{"enrichment", "crm_upsert", "notify"} {
		if v, _ := w.value("leadintake_downstream_calls_total", map[string]string{"target": target, "result": "success"}); v != 1 {
			t.Errorf("worker: leadintake_downstream_calls_total{target=%q,result=success} = %v, want 1", target, v)
		}
		if n, _ := w.value("leadintake_downstream_call_duration_seconds", map[string]string{"target": target}); n != 1 {
			t.Errorf("worker: leadintake_downstream_call_duration_seconds{target=%q} count %v, want 1", target, n)
		}
	}
	completedJobs, _ := w.value("leadintake_jobs_total", map[string]string{"kind": "process_lead", "outcome": "completed"})
	if completedJobs != 1 {
		t.Errorf("worker: leadintake_jobs_total{kind=process_lead,outcome=completed} = %v, want 1; outcomes: %v", completedJobs, w.labelValues("leadintake_jobs_total", "outcome"))
	}
	for _, name := range []string{"leadintake_downstream_calls_total", "leadintake_downstream_call_duration_seconds", "leadintake_leads_finished_total", "leadintake_jobs_total"} {
		if _, ok := w[name]; !ok {
			t.Errorf("worker: no %s", name)
		}
	}
}
