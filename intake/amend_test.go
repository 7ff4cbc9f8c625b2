package intake_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
)

// otherBody is another enquiry than validBody.
const otherBody = `{"email":"ada@example.com","source":"website","name":"Ada King"}`

func TestAmendmentClaims(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	amend := func(key, supersedes, body string) *http.Request {
		return api.submission(key, body, withHeader("Supersedes", supersedes))
	}
	// claimed submits validBody under a new key and returns it.
	claimed := func(t *testing.T) string {
		t.Helper()
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
		return key
	}
	// refused sends an amendment under a new key, checks the refusal, and
	// that the key is still free.
	refused := func(t *testing.T, supersedes string, status int, code response.Code) {
		t.Helper()
		key := testkit.NewKey()
		api.send(t, amend(key, supersedes, otherBody)).requireError(t, status, code)
		if keyStored(t, api.Pool, "a", key) {
			t.Fatal("the refused amendment stored its key")
		}
	}

	t.Run("RefusesMalformedSupersedes", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"short", "has space 1234", "555-123-4567", `"unterminated-key`} {
			refused(t, v, http.StatusBadRequest, response.CodeSupersedesInvalid)
		}
	})

	t.Run("RefusesItsOwnKey", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		api.send(t, amend(key, key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeSupersedesInvalid)
		if keyStored(t, api.Pool, "a", key) {
			t.Fatal("the refused amendment stored its key")
		}
		// Validation first.
		api.send(t, amend(key, key, `{"email":"ada@example.com"}`)).requireError(t, http.StatusUnprocessableEntity, response.CodeValidationFailed)
	})

	// A key that exists answers first, by the outcome table: the same key
	// with another Supersedes (here its own) is another request.
	t.Run("ItsOwnExistingKeyIsReused", func(t *testing.T) {
		t.Parallel()
		original := claimed(t)
		for _, body := range []string{validBody, otherBody} {
			api.send(t, amend(original, original, body)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		}
		amendment := testkit.NewKey()
		api.send(t, amend(amendment, original, otherBody)).requireAccepted(t, amendment, false)
		api.send(t, amend(amendment, amendment, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		// Finished, the same.
		finishKey(t, api, original, finish{Body: `{"status":"completed","lead_id":"L1","crm_id":"crm_1","score":85,"tier":"hot","notified":true,"warnings":[]}`})
		api.send(t, amend(original, original, validBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		// A page's key too.
		page := testkit.NewKey()
		api.send(t, api.submission(page, validBody, fromPage(shopOrigin))).requireAccepted(t, page, false)
		api.send(t, api.submission(page, validBody, fromPage(shopOrigin), withHeader("Supersedes", page))).
			requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
	})

	t.Run("RefusesUnknownForeignAndExpiredKeys", func(t *testing.T) {
		t.Parallel()
		refused(t, testkit.NewKey(), http.StatusUnprocessableEntity, response.CodeSupersedesUnknown)
		foreign := testkit.NewKey()
		req := api.submission(foreign, validBody)
		req.Header.Set("Authorization", "Bearer "+tokenB)
		api.send(t, req).requireAccepted(t, foreign, false)
		refused(t, foreign, http.StatusUnprocessableEntity, response.CodeSupersedesUnknown)
		expired := claimed(t)
		finishKey(t, api, expired, finish{ExpiresIn: -time.Minute})
		refused(t, expired, http.StatusUnprocessableEntity, response.CodeSupersedesUnknown)
	})

	t.Run("OneAmendmentOfAKeyWins", func(t *testing.T) {
		t.Parallel()
		for range 5 {
			original := claimed(t)
			keys := []string{testkit.NewKey(), testkit.NewKey()}
			replies := make([]*reply, 2)
			together(2, func(i int) {
				var err error
				replies[i], err = api.trySend(amend(keys[i], original, otherBody))
				if err != nil {
					t.Error(err)
				}
			})
			won := 0
			for i, r := range replies {
				switch r.Status {
				case http.StatusAccepted:
					won++
				case http.StatusConflict:
					r.requireError(t, http.StatusConflict, response.CodeAlreadySuperseded)
					if keyStored(t, api.Pool, "a", keys[i]) {
						t.Fatal("the losing amendment stored its key")
					}
				default:
					t.Fatalf("amendment: %d %s", r.Status, r.Body)
				}
			}
			if won != 1 {
				t.Fatalf("%d amendments of one key won, want 1", won)
			}
		}
	})

	t.Run("SupersedesIsPartOfTheRequest", func(t *testing.T) {
		t.Parallel()
		original, other := claimed(t), claimed(t)
		key := testkit.NewKey()
		api.send(t, amend(key, original, otherBody)).requireAccepted(t, key, false)
		api.send(t, amend(key, original, otherBody)).requireAccepted(t, key, true)
		api.send(t, api.submission(key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		api.send(t, amend(key, other, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		// Its own retry answers first, even once the key it supersedes has
		// expired.
		finishKey(t, api, original, finish{ExpiresIn: -time.Minute})
		api.send(t, amend(key, original, otherBody)).requireAccepted(t, key, true)
	})

	t.Run("OperationsShowTheChain", func(t *testing.T) {
		t.Parallel()
		first := claimed(t)
		second, third := testkit.NewKey(), testkit.NewKey()
		api.send(t, amend(second, first, otherBody)).requireAccepted(t, second, false)
		api.send(t, amend(third, second, validBody)).requireAccepted(t, third, false)
		for _, tt := range []struct{ key, supersedes, supersededBy string }{
			{first, "", second}, {second, first, third}, {third, second, ""},
		} {
			op := getOperation(t, api, tt.key)
			if deref(op.Supersedes) != tt.supersedes || deref(op.SupersededBy) != tt.supersededBy {
				t.Errorf("%s: supersedes %v, superseded_by %v; want %q, %q", tt.key, op.Supersedes, op.SupersededBy, tt.supersedes, tt.supersededBy)
			}
		}
		refused(t, first, http.StatusConflict, response.CodeAlreadySuperseded)

		// The chain shares the first lead's reference; each lead knows its
		// place in it.
		rows, err := api.Pool.Query(context.Background(), `
SELECT l.external_ref, l.amendment FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = 'a' AND k.key = ANY($1) ORDER BY l.amendment`, []string{first, second, third})
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var refs []string
		for n := 0; rows.Next(); n++ {
			var ref string
			var amendment int
			if err := rows.Scan(&ref, &amendment); err != nil {
				t.Fatal(err)
			}
			if amendment != n {
				t.Errorf("lead %d of the chain is amendment %d", n, amendment)
			}
			refs = append(refs, ref)
		}
		if len(refs) != 3 || refs[1] != refs[0] || refs[2] != refs[0] {
			t.Errorf("references along the chain: %q, want the first one's", refs)
		}
	})

	t.Run("SupersededFailureIsNotReopened", func(t *testing.T) {
		t.Parallel()
		original := claimed(t)
		finishKey(t, api, original, finish{
			State: "failed", Status: http.StatusBadGateway, FailureCode: response.CodeDownstreamUnavailable,
			Body: `{"status":"failed","lead_id":"x","error":{"code":"downstream_unavailable","message":"m"}}`,
		})
		key := testkit.NewKey()
		api.send(t, amend(key, original, otherBody)).requireAccepted(t, key, false)
		res := api.send(t, api.submission(original, validBody))
		if res.Status != http.StatusBadGateway || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry of the superseded failure: %d %s, want its 502 replayed", res.Status, res.Body)
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
