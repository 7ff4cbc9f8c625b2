package fake_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/webhook"
)

// newSecret returns a Standard Webhooks secret of 32 bytes derived from
// name, so that tests can tell secrets apart.
func newSecret(t *testing.T, name string) webhook.Secret {
	t.Helper()
	key := []byte(strings.Repeat(name, 32/len(name)+1)[:32])
	secret, err := webhook.ParseSecret("whsec_" + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// callbackBody is a callback body as the contract has it.
func callbackBody(typ, key string) string {
	return `{"type":"` + typ + `","timestamp":"2026-05-12T09:30:00Z","data":{"idempotency_key":"` + key +
		`","lead_id":"7f1d2c3e-0000-4000-8000-000000000001","response":{"status":201,"body":{"status":"completed"}}}}`
}

// callback POSTs body to /callbacks/{client} as the message id, sent at ts
// and signed with secret (unsigned with the zero Secret).
func (b *bundle) callback(client, id string, secret webhook.Secret, ts time.Time, body string) (response, error) {
	headers := []string{"webhook-id", id, "webhook-timestamp", strconv.FormatInt(ts.Unix(), 10)}
	if !secret.IsZero() {
		headers = append(headers, "webhook-signature", webhook.Sign(secret, id, ts, []byte(body)))
	}
	return b.do(http.MethodPost, "/callbacks/"+client, body, headers...)
}

func TestCallback(t *testing.T) {
	t.Parallel()

	t.Run("VerifiesAndRecordsEveryAttempt", func(t *testing.T) {
		t.Parallel()
		secret := newSecret(t, "acme")
		b := setup(t, &fake.Options{CallbackSecret: secret})
		body := callbackBody("lead.completed", "key-0001")
		first := time.Now().Add(-time.Minute).Truncate(time.Second)
		r1, err := b.callback("acme", "msg_1", secret, first, body)
		if err != nil || r1.status != http.StatusOK || r1.json(t)["status"] != "received" {
			t.Fatalf("first attempt: %v %v %s, want 200 received", r1.status, err, r1.body)
		}
		// A retry carries the same id and a fresh timestamp.
		second := first.Add(30 * time.Second)
		r2, err := b.callback("acme", "msg_1", secret, second, body)
		if err != nil || r2.status != http.StatusOK || r2.json(t)["status"] != "duplicate" {
			t.Fatalf("second attempt: %v %v %s, want 200 duplicate", r2.status, err, r2.body)
		}
		if _, err := b.callback("acme", "msg_2", secret, second, callbackBody("lead.failed", "key-0002")); err != nil {
			t.Fatal(err)
		}

		c, ok := b.fake.Callback("msg_1")
		if !ok || c.ID != "msg_1" || c.Client != "acme" || c.Type != "lead.completed" || c.Deliveries != 2 || !c.Verified {
			t.Fatalf("Callback(msg_1) = %+v, %v", c, ok)
		}
		if string(c.FirstBody) != body {
			t.Errorf("first body %s, want %s", c.FirstBody, body)
		}
		if len(c.Attempts) != 2 || !c.Attempts[0].Timestamp.Equal(first) || !c.Attempts[1].Timestamp.Equal(second) ||
			!c.Attempts[0].Verified || c.Attempts[0].Problem != "" || c.Attempts[1].ReceivedAt.Before(c.Attempts[0].ReceivedAt) {
			t.Errorf("attempts %+v", c.Attempts)
		}
		all := b.fake.Callbacks()
		if len(all) != 2 || all[0].ID != "msg_1" || all[1].ID != "msg_2" || all[1].Type != "lead.failed" {
			t.Errorf("Callbacks() = %+v, want msg_1 then msg_2", all)
		}
		st := b.fake.State()
		if st.Totals.Callbacks != 2 || st.Totals.CallbackDeliveries != 3 || st.Totals.UnverifiedCallbacks != 0 || st.Requests[fake.Callback] != 3 {
			t.Errorf("state totals %+v, requests %v", st.Totals, st.Requests)
		}
		if _, ok := b.fake.Callback("msg_3"); ok {
			t.Error("Callback(msg_3) found a callback never sent")
		}
	})

	t.Run("RefusesWhatDoesNotVerify", func(t *testing.T) {
		t.Parallel()
		secret := newSecret(t, "acme")
		b := setup(t, &fake.Options{CallbackSecret: secret})
		body := callbackBody("lead.completed", "key-0001")
		now := time.Now()
		for _, c := range []struct {
			id      string
			send    func(id string) (response, error)
			problem error
		}{
			{"msg_other_secret", func(id string) (response, error) {
				return b.callback("acme", id, newSecret(t, "other"), now, body)
			}, webhook.ErrSignature},
			{"msg_unsigned", func(id string) (response, error) {
				return b.callback("acme", id, webhook.Secret{}, now, body)
			}, webhook.ErrSignature},
			{"msg_stale", func(id string) (response, error) {
				return b.callback("acme", id, secret, now.Add(-6*time.Minute), body)
			}, webhook.ErrTimestamp},
			{"msg_tampered", func(id string) (response, error) {
				return b.do(http.MethodPost, "/callbacks/acme", strings.Replace(body, "201", "200", 1),
					"webhook-id", id, "webhook-timestamp", strconv.FormatInt(now.Unix(), 10),
					"webhook-signature", webhook.Sign(secret, id, now, []byte(body)))
			}, webhook.ErrSignature},
		} {
			r, err := c.send(c.id)
			if err != nil || r.status != http.StatusUnauthorized {
				t.Errorf("%s: %v %v, want 401", c.id, r.status, err)
				continue
			}
			cb, ok := b.fake.Callback(c.id)
			if !ok || cb.Verified || cb.Deliveries != 1 || cb.Attempts[0].Verified {
				t.Errorf("%s: Callback = %+v, %v; want one unverified attempt", c.id, cb, ok)
				continue
			}
			// The problem is Verify's message, which names no secret.
			want := c.problem.Error()
			if !strings.Contains(cb.Attempts[0].Problem, want) {
				t.Errorf("%s: problem %q, want it to say %q", c.id, cb.Attempts[0].Problem, want)
			}
		}
		if st := b.fake.State(); st.Totals.UnverifiedCallbacks != 4 || st.Totals.Callbacks != 4 {
			t.Errorf("totals %+v, want 4 unverified callbacks", st.Totals)
		}

		// A correct retry of a refused one is accepted, and the callback
		// stays marked: one of its attempts did not verify.
		if r, err := b.callback("acme", "msg_unsigned", secret, now, body); err != nil || r.status != http.StatusOK || r.json(t)["status"] != "received" {
			t.Errorf("signed retry: %v %v %s, want 200 received", r.status, err, r.body)
		}
		if cb, _ := b.fake.Callback("msg_unsigned"); cb.Verified || cb.Deliveries != 2 || !cb.Attempts[1].Verified {
			t.Errorf("after a good retry: %+v", cb)
		}
	})

	t.Run("RefusesMalformedWithoutRecording", func(t *testing.T) {
		t.Parallel()
		secret := newSecret(t, "acme")
		b := setup(t, &fake.Options{CallbackSecret: secret})
		now := time.Now()
		if r, _ := b.callback("acme", "", secret, now, callbackBody("lead.completed", "k")); r.status != http.StatusBadRequest {
			t.Errorf("no webhook-id: %d, want 400", r.status)
		}
		for _, body := range []string{"{", "[]", "null", ""} {
			if r, _ := b.callback("acme", "msg_bad", secret, now, body); r.status != http.StatusBadRequest {
				t.Errorf("body %q: %d, want 400", body, r.status)
			}
		}
		if r := b.mustDo(t, http.MethodGet, "/callbacks/acme", nil); r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET: %d, want 405", r.status)
		}
		if cbs := b.fake.Callbacks(); len(cbs) != 0 {
			t.Errorf("recorded %+v", cbs)
		}
		if n := b.fake.Requests(fake.Callback); n != 5 {
			t.Errorf("Requests(Callback) = %d, want 5", n)
		}
	})

	t.Run("WithoutSecretAcceptsUnverified", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		if r, err := b.callback("acme", "msg_1", webhook.Secret{}, time.Now(), callbackBody("lead.completed", "k")); err != nil || r.status != http.StatusOK {
			t.Fatalf("unsigned: %v %v, want 200", r.status, err)
		}
		if r, err := b.callback("acme", "msg_2", newSecret(t, "any"), time.Now(), callbackBody("lead.completed", "k")); err != nil || r.status != http.StatusOK {
			t.Fatalf("signed: %v %v, want 200", r.status, err)
		}
		for _, cb := range b.fake.Callbacks() {
			if cb.Verified || cb.Attempts[0].Problem == "" {
				t.Errorf("%s: %+v; want it unverified, saying why", cb.ID, cb)
			}
		}
		if st := b.fake.State(); st.Totals.UnverifiedCallbacks != 2 {
			t.Errorf("totals %+v", st.Totals)
		}
	})

	t.Run("SetCallbackSecretUntilReset", func(t *testing.T) {
		t.Parallel()
		oldSecret, newer := newSecret(t, "old"), newSecret(t, "new")
		b := setup(t, &fake.Options{CallbackSecret: oldSecret})
		body := callbackBody("lead.completed", "k")
		send := func(id string, secret webhook.Secret) int {
			r, err := b.callback("acme", id, secret, time.Now(), body)
			if err != nil {
				t.Fatal(err)
			}
			return r.status
		}
		if got := send("msg_1", newer); got != http.StatusUnauthorized {
			t.Errorf("new secret before the rotation: %d, want 401", got)
		}
		b.fake.SetCallbackSecret(newer)
		if got := send("msg_2", newer); got != http.StatusOK {
			t.Errorf("new secret after the rotation: %d, want 200", got)
		}
		if got := send("msg_3", oldSecret); got != http.StatusUnauthorized {
			t.Errorf("old secret after the rotation: %d, want 401", got)
		}
		b.fake.Reset()
		if got := send("msg_4", oldSecret); got != http.StatusOK {
			t.Errorf("Options' secret after Reset: %d, want 200", got)
		}
		if cbs := b.fake.Callbacks(); len(cbs) != 1 || cbs[0].ID != "msg_4" {
			t.Errorf("after Reset: %+v, want msg_4 alone", cbs)
		}
	})

	t.Run("Faults", func(t *testing.T) {
		t.Parallel()
		secret := newSecret(t, "acme")
		b := setup(t, &fake.Options{CallbackSecret: secret})
		body := callbackBody("lead.completed", "k")
		b.fake.Script(fake.Callback,
			fake.Fault{Status: 503, RetryAfter: "2"},
			fake.Fault{Status: 429, RetryAfter: "Wed, 21 Oct 2026 07:28:00 GMT"},
			fake.Fault{DropBeforeApply: true},
			fake.Fault{DropAfterApply: true},
			fake.Fault{HangAfterApply: true},
			fake.Fault{Delay: 100 * time.Millisecond},
		)
		send := func() (response, error) { return b.callback("acme", "msg_1", secret, time.Now(), body) }
		if r, err := send(); err != nil || r.status != 503 || r.header.Get("Retry-After") != "2" {
			t.Fatalf("first: %v %v, want the scripted 503 with Retry-After", r.status, err)
		}
		if r, err := send(); err != nil || r.status != 429 || r.header.Get("Retry-After") == "" {
			t.Fatalf("second: %v %v, want the scripted 429 with Retry-After", r.status, err)
		}
		if _, err := send(); err == nil {
			t.Fatal("third: no error, want the connection dropped")
		}
		if _, ok := b.fake.Callback("msg_1"); ok {
			t.Fatal("a faulted attempt was recorded")
		}
		if _, err := send(); err == nil {
			t.Fatal("fourth: no error, want the connection dropped after applying")
		}
		if c, ok := b.fake.Callback("msg_1"); !ok || c.Deliveries != 1 || !c.Verified {
			t.Fatalf("after the lost answer: %+v, %v; want the attempt recorded", c, ok)
		}
		client := &http.Client{Transport: b.client.Transport, Timeout: 300 * time.Millisecond}
		_, err := doWith(client, http.MethodPost, b.url+"/callbacks/acme", body, "webhook-id", "msg_1",
			"webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10),
			"webhook-signature", webhook.Sign(secret, "msg_1", time.Now(), []byte(body)))
		var uerr *url.Error
		if !errors.As(err, &uerr) || !uerr.Timeout() {
			t.Fatalf("fifth: %v, want a client time-out", err)
		}
		start := time.Now()
		if r, err := send(); err != nil || r.status != http.StatusOK || r.json(t)["status"] != "duplicate" || time.Since(start) < 100*time.Millisecond {
			t.Fatalf("sixth: %v %v %s after %v, want 200 duplicate after the delay", r.status, err, r.body, time.Since(start))
		}
		if c, _ := b.fake.Callback("msg_1"); c.Deliveries != 3 {
			t.Errorf("deliveries = %d, want 3 (drop and hang after applying, then the delayed one)", c.Deliveries)
		}
		if n := b.fake.Requests(fake.Callback); n != 6 {
			t.Errorf("Requests(Callback) = %d, want 6", n)
		}
	})

	t.Run("ChaosAndControlAPI", func(t *testing.T) {
		t.Parallel()
		secret := newSecret(t, "acme")
		b := setup(t, &fake.Options{CallbackSecret: secret})
		body := callbackBody("lead.completed", "k")
		if r := b.mustDo(t, http.MethodPost, "/_fake/chaos", `{"target":"all","fail_rate":1,"fail_status":502,"retry_after":"3"}`); r.status != http.StatusNoContent {
			t.Fatalf("chaos: %d %s", r.status, r.body)
		}
		if r, err := b.callback("acme", "msg_1", secret, time.Now(), body); err != nil || r.status != 502 || r.header.Get("Retry-After") != "3" {
			t.Fatalf("under chaos for all: %v %v, want 502 with Retry-After", r.status, err)
		}
		if r := b.mustDo(t, http.MethodPost, "/_fake/chaos", `{"target":"callback"}`); r.status != http.StatusNoContent {
			t.Fatalf("chaos off: %d %s", r.status, r.body)
		}
		if r := b.mustDo(t, http.MethodPost, "/_fake/script", `{"target":"callback","faults":[{"status":500}]}`); r.status != http.StatusNoContent {
			t.Fatalf("script: %d %s", r.status, r.body)
		}
		if r, _ := b.callback("acme", "msg_1", secret, time.Now(), body); r.status != 500 {
			t.Errorf("scripted: %d, want 500", r.status)
		}
		if r, _ := b.callback("acme", "msg_1", secret, time.Now(), body); r.status != http.StatusOK {
			t.Errorf("after the script: %d, want 200", r.status)
		}

		r := b.mustDo(t, http.MethodGet, "/_fake/state", nil)
		var st fake.State
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("state %s: %v", r.body, err)
		}
		c := st.Callbacks["msg_1"]
		if c.ID != "msg_1" || c.Client != "acme" || c.Deliveries != 1 || !c.Verified || len(c.Attempts) != 1 || c.Attempts[0].Timestamp.IsZero() {
			t.Errorf("state.callbacks[msg_1] = %+v", c)
		}
		if st.Totals.Callbacks != 1 || st.Totals.CallbackDeliveries != 1 || st.Requests[fake.Callback] != 3 {
			t.Errorf("state %s", r.body)
		}
		if strings.Contains(string(r.body), "idempotency_key") {
			t.Errorf("state carries the callback's body: %s", r.body)
		}
	})
}

func TestTargets(t *testing.T) {
	t.Parallel()
	seen := map[fake.Target]bool{}
	for _, target := range fake.Targets() {
		got, err := fake.ParseTarget(string(target))
		if err != nil || got != target || seen[target] {
			t.Errorf("ParseTarget(%q) = %q, %v (seen before: %t)", target, got, err, seen[target])
		}
		seen[target] = true
	}
	if !seen[fake.Callback] {
		t.Error("Targets() lacks Callback")
	}
	_, err := fake.ParseTarget("callbacks")
	if err == nil || !strings.Contains(err.Error(), "callback") || !strings.Contains(err.Error(), "crm_lookup") {
		t.Errorf("ParseTarget(callbacks): %v, want an error naming the targets", err)
	}
}
