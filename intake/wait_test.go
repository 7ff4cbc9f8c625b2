package intake_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
)

// finishAndAnnounce finishes client a's key by hand, as the worker's
// finishing transaction does: the final response and, at commit, the
// notification on the channel the api listens to.
func finishAndAnnounce(t *testing.T, api *testAPI, key string) {
	t.Helper()
	ctx := context.Background()
	tx, err := api.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `
UPDATE idempotency_keys
SET state = 'completed', response_status = 201, response_body = '{"status":"completed","waited":true}',
    finished_at = now(), updated_at = now(), expires_at = now() + interval '1 hour'
WHERE client_id = 'a' AND key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `
SELECT pg_notify('leadintake_finished', lead_id::text) FROM idempotency_keys WHERE client_id = 'a' AND key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestPreferWait(t *testing.T) {
	t.Parallel()

	t.Run("AnswersAtTheBoundAsTheKeyStands", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, &testAPIOpts{MaxWait: time.Second, Listen: true})
		key := testkit.NewKey()
		start := time.Now()
		res := api.send(t, api.submission(key, validBody, withHeader("Prefer", "wait=5")))
		res.requireAccepted(t, key, false)
		if got := res.Header.Get("Preference-Applied"); got != "wait=1" {
			t.Errorf("Preference-Applied %q, want wait=1 (MAX_WAIT)", got)
		}
		if held := time.Since(start); held < time.Second {
			t.Errorf("answered after %s, want the whole second of MAX_WAIT", held)
		}
		op := api.send(t, withPrefer(api.operation(tokenA, key), "wait=1"))
		if op.Status != http.StatusOK || op.Header.Get("Preference-Applied") != "wait=1" {
			t.Errorf("GET operation with Prefer: %d, Preference-Applied %q", op.Status, op.Header.Get("Preference-Applied"))
		}
	})

	t.Run("PreferenceAppliedOnEveryAnswer", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, &testAPIOpts{MaxWait: time.Second})
		for _, req := range []*http.Request{
			api.submission(testkit.NewKey(), "{", withHeader("Prefer", "wait=0")),                                       // 400
			api.submission(testkit.NewKey(), validBody, withHeader("Prefer", "wait=0"), withoutHeader("Authorization")), // 401
			withPrefer(api.operation(tokenA, "no-such-key-1"), "wait=0"),                                                // 404
		} {
			if got := api.send(t, req).Header.Get("Preference-Applied"); got != "wait=0" {
				t.Errorf("%s %s: Preference-Applied %q, want wait=0", req.Method, req.URL.Path, got)
			}
		}
		for _, prefer := range []string{"", "respond-async", "wait=soon", "wait=-1", "wait=+3", "wait=3.0", "wait=3s", "wait="} {
			req := api.submission(testkit.NewKey(), validBody)
			if prefer != "" {
				req.Header.Set("Prefer", prefer)
			}
			if got := api.send(t, req).Header.Get("Preference-Applied"); got != "" {
				t.Errorf("Prefer %q: Preference-Applied %q, want none", prefer, got)
			}
		}
	})

	t.Run("HugeWaitsAreTheBound", func(t *testing.T) {
		t.Parallel()
		// Any N of digits is min(N, MAX_WAIT): one too large for a
		// duration, or for any integer, is held for MAX_WAIT, not
		// overflowed into no wait.
		api := newTestAPI(t, &testAPIOpts{MaxWait: time.Second, Listen: true})
		for _, n := range []string{"10000000000", "9223372036854775807", "99999999999999999999999999"} {
			key := testkit.NewKey()
			start := time.Now()
			res := api.send(t, api.submission(key, validBody, withHeader("Prefer", "wait="+n)))
			res.requireAccepted(t, key, false)
			if got := res.Header.Get("Preference-Applied"); got != "wait=1" {
				t.Errorf("wait=%s: Preference-Applied %q, want wait=1 (MAX_WAIT)", n, got)
			}
			if held := time.Since(start); held < time.Second {
				t.Errorf("wait=%s: answered after %s, want the whole second of MAX_WAIT", n, held)
			}
		}
	})

	t.Run("FinishWakesTheHeldRequests", func(t *testing.T) {
		t.Parallel()
		// MAX_WAIT is far longer than the test waits for the answer: only
		// the notification of the finish can answer in time.
		api := newTestAPI(t, &testAPIOpts{MaxWait: 10 * time.Minute, Listen: true})
		key := testkit.NewKey()
		api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)

		type answer struct {
			res *reply
			err error
		}
		answers := make(chan answer, 2)
		for _, req := range []*http.Request{
			api.submission(key, validBody, withHeader("Prefer", "wait=600")),
			withPrefer(api.operation(tokenA, key), "wait=600"),
		} {
			go func() {
				res, err := api.trySend(req)
				answers <- answer{res, err}
			}()
		}
		time.Sleep(200 * time.Millisecond) // a moment to be held: a finish before it is found at once anyway
		finishAndAnnounce(t, api, key)
		for range 2 {
			select {
			case a := <-answers:
				if a.err != nil {
					t.Fatal(a.err)
				}
				switch a.res.Status {
				case http.StatusCreated: // the POST: the final response, replayed
					if a.res.Header.Get("Idempotent-Replayed") != "true" {
						t.Errorf("POST answered %s", a.res.Header.Get("Idempotent-Replayed"))
					}
				case http.StatusOK: // the operation
					var op operationBody
					if err := decodeStrict(a.res.Body, &op); err != nil || op.State != "completed" {
						t.Errorf("operation after the wait: %s", a.res.Body)
					}
				default:
					t.Errorf("held request answered %d %s", a.res.Status, a.res.Body)
				}
			case <-time.After(testkit.Patience):
				t.Fatal("a held request was not woken by the finish")
			}
		}
	})
}

func withPrefer(req *http.Request, prefer string) *http.Request {
	req.Header.Set("Prefer", prefer)
	return req
}
