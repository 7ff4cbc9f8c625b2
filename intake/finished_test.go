package intake_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// finish is a final response written into idempotency_keys by hand, as the
// worker would. Its zero value is a completed key that expires in an hour.
type finish struct {
	State       string        // default completed
	Status      int           // default 201
	Body        string        // default a completed body with odd spacing
	FailureCode response.Code // required for failed
	// ExpiresIn is the time left before the key expires; negative for a key
	// whose retention has passed. Default an hour.
	ExpiresIn time.Duration
}

// finishKey finishes client a's key with f, within the table's CHECK
// constraints: a finished key has a response, finished_at and expires_at,
// and a failure code exactly when it failed.
func finishKey(t *testing.T, api *testAPI, key string, f finish) {
	t.Helper()
	f.State = cmp.Or(f.State, string(lead.KeyCompleted))
	f.Body = cmp.Or(f.Body, `{"status": "completed",  "x":1}`)
	if f.Status == 0 {
		f.Status = http.StatusCreated
	}
	if f.ExpiresIn == 0 {
		f.ExpiresIn = time.Hour
	}
	var failureCode *response.Code
	if f.FailureCode != "" {
		failureCode = &f.FailureCode
	}
	tag, err := api.Pool.Exec(context.Background(), `
UPDATE idempotency_keys
SET state = $3, response_status = $4, response_body = $5, failure_code = $6,
    finished_at = now(), updated_at = now(), expires_at = now() + make_interval(secs => $7)
WHERE client_id = $1 AND key = $2`,
		"a", key, f.State, f.Status, f.Body, failureCode, f.ExpiresIn.Seconds())
	if err != nil {
		t.Fatalf("finish key: %v", err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("finish key: no key %q", key)
	}
}

// getOperation reads client a's operation, which must exist.
func getOperation(t *testing.T, api *testAPI, key string) operationBody {
	t.Helper()
	res := api.send(t, api.operation(tokenA, key))
	if res.Status != http.StatusOK {
		t.Fatalf("GET operation: %d %s", res.Status, res.Body)
	}
	var op operationBody
	if err := decodeStrict(res.Body, &op); err != nil {
		t.Fatalf("GET operation: %s: %v", res.Body, err)
	}
	if op.IdempotencyKey != key {
		t.Fatalf("GET operation: key %q, want %q", op.IdempotencyKey, key)
	}
	return op
}

func TestFinishedKeys(t *testing.T) {
	t.Parallel()

	const otherBody = `{"email":"eve@example.com","source":"linkedin"}`

	type testBundle struct {
		api    *testAPI
		key    string
		leadID string // of the first submission of key with validBody
	}
	// setup submits validBody under a fresh key: one lead, one key, one
	// job.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		api := newTestAPI(t, nil)
		key := testkit.NewKey()
		first := api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
		return &testBundle{api: api, key: key, leadID: first.LeadID}
	}

	t.Run("ShowsProcessingOperation", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		op := getOperation(t, bundle.api, bundle.key)
		if op.State != string(lead.KeyProcessing) || op.LeadID != bundle.leadID || op.ExpiresAt != nil || op.Response != nil {
			t.Fatalf("operation %+v, want processing lead %s without expires_at or response", op, bundle.leadID)
		}
		for _, ts := range []string{op.CreatedAt, op.UpdatedAt} {
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Fatalf("timestamp %q: %v", ts, err)
			}
		}
		// Null, not left out.
		var members map[string]json.RawMessage
		if err := json.Unmarshal(bundle.api.send(t, bundle.api.operation(tokenA, bundle.key)).Body, &members); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"expires_at", "response"} {
			if string(members[name]) != "null" {
				t.Fatalf("%s is %q, want null", name, members[name])
			}
		}
	})

	t.Run("ReplaysNeedsReconciliationAsInProgress", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		if _, err := bundle.api.Pool.Exec(context.Background(),
			"UPDATE idempotency_keys SET state = 'needs_reconciliation' WHERE key = $1", bundle.key); err != nil {
			t.Fatal(err)
		}
		body := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, true)
		if body.Status != string(lead.KeyNeedsReconciliation) || body.LeadID != bundle.leadID {
			t.Fatalf("202 body %+v, want needs_reconciliation of lead %s", body, bundle.leadID)
		}
		if op := getOperation(t, bundle.api, bundle.key); op.State != string(lead.KeyNeedsReconciliation) || op.Response != nil || op.ExpiresAt != nil {
			t.Fatalf("operation %+v", op)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("ReplaysCompletedResponseByteForByte", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const stored = `{"status": "completed",  "x":1}`
		finishKey(t, bundle.api, bundle.key, finish{Body: stored})

		// A replay of the same lead, formatted differently: the stored
		// answer, byte for byte.
		reordered := `{ "name":"Ada Lovelace", "source":"website", "email":"ada@example.com" }`
		for _, body := range []string{validBody, reordered} {
			res := bundle.api.send(t, bundle.api.submission(bundle.key, body))
			if res.Status != http.StatusCreated || string(res.Body) != stored {
				t.Fatalf("replay: %d %q, want 201 %q", res.Status, res.Body, stored)
			}
			for name, want := range map[string]string{
				"Idempotent-Replayed": "true", "Idempotency-Key": bundle.key, "Content-Type": "application/json",
			} {
				if got := res.Header.Get(name); got != want {
					t.Fatalf("replay header %s: %q, want %q", name, got, want)
				}
			}
		}

		op := getOperation(t, bundle.api, bundle.key)
		var expiresAt time.Time
		if err := bundle.api.Pool.QueryRow(context.Background(),
			"SELECT expires_at FROM idempotency_keys WHERE key = $1", bundle.key).Scan(&expiresAt); err != nil {
			t.Fatal(err)
		}
		if op.State != string(lead.KeyCompleted) || op.LeadID != bundle.leadID || op.ExpiresAt == nil || op.Response == nil {
			t.Fatalf("operation %+v, want completed with expires_at and response", op)
		}
		if got, err := time.Parse(time.RFC3339Nano, *op.ExpiresAt); err != nil || !got.Equal(expiresAt) {
			t.Fatalf("expires_at %q (%v), want %s", *op.ExpiresAt, err, expiresAt)
		}
		if op.Response.Status != http.StatusCreated || !jsonEqual(t, op.Response.Body, []byte(stored)) {
			t.Fatalf("response %d %s, want 201 %s", op.Response.Status, op.Response.Body, stored)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("RefusesOtherPayloadOnFinishedKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{})
		bundle.api.send(t, bundle.api.submission(bundle.key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("GivesExpiredKeyToNewSubmission", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{ExpiresIn: -time.Second})
		bundle.api.send(t, bundle.api.operation(tokenA, bundle.key)).requireError(t, http.StatusNotFound, response.CodeNotFound)

		// Even a different payload takes the key over, as a new lead.
		body := bundle.api.send(t, bundle.api.submission(bundle.key, otherBody)).requireAccepted(t, bundle.key, false)
		if body.LeadID == bundle.leadID {
			t.Fatalf("the expired key's lead %s was reused", body.LeadID)
		}
		if op := getOperation(t, bundle.api, bundle.key); op.State != string(lead.KeyProcessing) || op.LeadID != body.LeadID || op.Response != nil {
			t.Fatalf("operation %+v, want the new lead processing", op)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 1, Jobs: 2})
		// And the key now means the new payload.
		bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
	})

	t.Run("GivesExpiredKeyToSamePayloadAsNewLead", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{ExpiresIn: -time.Second})
		body := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, false)
		if body.LeadID == bundle.leadID {
			t.Fatalf("the expired key's lead %s was reused", body.LeadID)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 1, Jobs: 2})
	})

	t.Run("ReopensDownstreamUnavailable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{
			State: string(lead.KeyFailed), FailureCode: response.CodeDownstreamUnavailable, Status: http.StatusBadGateway,
			Body: `{"status":"failed","lead_id":"` + bundle.leadID + `","error":{"code":"downstream_unavailable","message":"try later"}}`,
		})
		// A different payload is still refused: the key is not free.
		bundle.api.send(t, bundle.api.submission(bundle.key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)

		body := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, false)
		if body.LeadID != bundle.leadID || body.Status != string(lead.KeyProcessing) {
			t.Fatalf("re-opened: %+v, want lead %s processing", body, bundle.leadID)
		}
		if op := getOperation(t, bundle.api, bundle.key); op.State != string(lead.KeyProcessing) || op.Response != nil || op.ExpiresAt != nil {
			t.Fatalf("operation %+v, want processing without response", op)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 2})
		// Re-opened, it is in progress again.
		bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, true)
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 2})
	})

	t.Run("TakesOverExpiredKeyOnceUnderRace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{ExpiresIn: -time.Second})
		leadID := requireOneClaim(t, bundle.key, submitTogether(t, bundle.api, bundle.key, 20, otherBody))
		if leadID == bundle.leadID {
			t.Fatalf("the expired key's lead %s was reused", leadID)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 1, Jobs: 2})
	})

	t.Run("ReopensOnceUnderRace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		finishKey(t, bundle.api, bundle.key, finish{
			State: string(lead.KeyFailed), FailureCode: response.CodeDownstreamUnavailable, Status: http.StatusBadGateway,
			Body: `{"status":"failed","error":{"code":"downstream_unavailable","message":"try later"}}`,
		})
		if leadID := requireOneClaim(t, bundle.key, submitTogether(t, bundle.api, bundle.key, 20, validBody)); leadID != bundle.leadID {
			t.Fatalf("re-opened as lead %s, want %s", leadID, bundle.leadID)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 2})
	})

	t.Run("ReplaysCRMRejected", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stored := `{"status":"failed", "lead_id":"` + bundle.leadID + `","error":{"code":"crm_rejected","message":"no"}}`
		finishKey(t, bundle.api, bundle.key, finish{
			State: string(lead.KeyFailed), FailureCode: response.CodeCRMRejected, Status: http.StatusUnprocessableEntity, Body: stored,
		})
		res := bundle.api.send(t, bundle.api.submission(bundle.key, validBody))
		if res.Status != http.StatusUnprocessableEntity || string(res.Body) != stored || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %q replayed=%q, want 422 %q replayed", res.Status, res.Body, res.Header.Get("Idempotent-Replayed"), stored)
		}
		if op := getOperation(t, bundle.api, bundle.key); op.State != string(lead.KeyFailed) || op.Response == nil || op.Response.Status != http.StatusUnprocessableEntity {
			t.Fatalf("operation %+v, want failed with its 422", op)
		}
		bundle.api.send(t, bundle.api.submission(bundle.key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}
