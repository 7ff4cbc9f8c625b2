package jobs_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/webhook"
)

// callbackOf waits until the fake received a verified callback announcing
// key's lead, and returns it with its decoded body.
func (b *testBundle) callbackOf(t *testing.T, sub *submission, typ string) (fake.CallbackMessage, map[string]any) {
	t.Helper()
	var msg fake.CallbackMessage
	testkit.Eventually(t, "a "+typ+" callback of the lead", func() bool {
		for _, m := range b.fake.Callbacks() {
			var v struct {
				Type string `json:"type"`
				Data struct {
					LeadID string `json:"lead_id"`
				} `json:"data"`
			}
			if json.Unmarshal(m.FirstBody, &v) == nil && v.Data.LeadID == sub.LeadID.String() && v.Type == typ && m.Verified {
				msg = m
				return b.delivered(t, m.ID)
			}
		}
		return false
	})
	return msg, jsonOf(t, msg.FirstBody)
}

// delivered reports whether the worker recorded the delivery of webhook-id
// id.
func (b *testBundle) delivered(t *testing.T, id string) bool {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM callbacks WHERE 'msg_' || replace(id::text, '-', '') = $1 AND delivered_at IS NOT NULL`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestCallbacks(t *testing.T) {
	t.Parallel()

	t.Run("AnnouncesTheFinalResponse", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		sub := bundle.submit(t, adaBody)
		got := bundle.waitFinished(t, sub.Key)
		msg, body := bundle.callbackOf(t, sub, "lead.completed")
		data, _ := body["data"].(map[string]any)
		resp, _ := data["response"].(map[string]any)
		if msg.Client != clientID || data["idempotency_key"] != sub.Key || resp["status"] != float64(http.StatusCreated) {
			t.Errorf("callback %+v %s", msg, msg.FirstBody)
		}
		if raw, _ := json.Marshal(resp["body"]); string(raw) != string(mustCompact(t, got.Raw)) {
			t.Errorf("callback's response body %s, want the stored %s", raw, got.Raw)
		}
		if _, err := time.Parse(time.RFC3339, body["timestamp"].(string)); err != nil {
			t.Errorf("timestamp %v: %v", body["timestamp"], err)
		}
	})

	t.Run("AnnouncesFailures", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusUnprocessableEntity})
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		bundle.callbackOf(t, sub, "lead.failed")
	})

	// The receiver fails, answers 429 with Retry-After, hangs past the
	// time-out and drops the connection before it answers: the same
	// delivery (one webhook-id) is attempted again until it is delivered,
	// each attempt signed with a fresh timestamp.
	t.Run("RetriesUntilDelivered", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{Timeout: time.Second})
		bundle.fake.Script(fake.Callback,
			fake.Fault{Status: http.StatusServiceUnavailable},
			fake.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"},
			fake.Fault{Hang: true},
			fake.Fault{DropBeforeApply: true},
			fake.Fault{DropAfterApply: true},
		)
		sub := bundle.submit(t, adaBody)
		msg, _ := bundle.callbackOf(t, sub, "lead.completed")
		if msg.Deliveries < 2 {
			t.Errorf("%d deliveries recorded, want the applied drop and the success at least", msg.Deliveries)
		}
		if n := bundle.fake.Requests(fake.Callback); n != 6 {
			t.Errorf("%d callback requests, want 6 (5 faults, then the delivery)", n)
		}
		if len(bundle.fake.Callbacks()) != 1 {
			t.Errorf("%d webhook-ids, want 1: one finish, one id", len(bundle.fake.Callbacks()))
		}
	})

	// A delivery is signed with the secret in force when it is sent.
	t.Run("SignsWithTheSecretInForce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		bundle.fake.Script(fake.Callback, fake.Fault{Status: http.StatusServiceUnavailable})
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		testkit.Eventually(t, "the first attempt", func() bool { return bundle.fake.Requests(fake.Callback) >= 1 })
		const rotated = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
		secret, err := webhook.ParseSecret(rotated)
		if err != nil {
			t.Fatal(err)
		}
		bundle.fake.SetCallbackSecret(secret)
		bundle.callers.Replace(clientsWithCallback(t, bundle.callbackURL(t), rotated))
		bundle.callbackOf(t, sub, "lead.completed")
	})

	t.Run("NoneWhileUnfinished", func(t *testing.T) {
		t.Parallel()
		g := newGate(http.MethodPut, "/crm/leads/", 1)
		bundle := setup(t, &setupOpts{Gate: g})
		sub := bundle.submit(t, adaBody)
		g.Arrived(t, 1)
		if n := len(bundle.fake.Callbacks()); n != 0 {
			t.Fatalf("%d callbacks while the lead is unfinished", n)
		}
		g.Open()
		bundle.waitFinished(t, sub.Key)
		bundle.callbackOf(t, sub, "lead.completed")
	})

	// A key that failed on transient failures is re-opened by a retry: its
	// second finish is announced again, under another webhook-id.
	t.Run("AnnouncesEveryFinish", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{MaxAttempts: 1})
		bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusServiceUnavailable})
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		first, _ := bundle.callbackOf(t, sub, "lead.failed")
		bundle.claim(t, sub.Key, adaBody)
		testkit.Eventually(t, "the second finish", func() bool {
			got, _ := bundle.key(t, sub.Key)
			return got.State == "completed"
		})
		second, _ := bundle.callbackOf(t, sub, "lead.completed")
		if first.ID == second.ID {
			t.Errorf("both finishes announced as %s", first.ID)
		}
	})

	// Zapier, n8n, Slack and Teams put the receiver's secret in the
	// callback URL's path: a failed delivery's error, in the log and in
	// River's job row (which River UI shows), names the URL's scheme and
	// host only, never its path, query or user-info.
	t.Run("ErrorsShowOnlyTheOriginOfItsURL", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		origin := "http://" + ln.Addr().String()
		ln.Close() // nothing listens: every delivery fails to connect
		const user, password, path, query = "cbuser-Zq81", "cbpass-Zq81", "S3cretPath-Zq81", "S3cretQuery-Zq81"
		bundle.secrets.add(user, password, path, query)
		bundle.callers.Replace(clientsWithCallback(t,
			"http://"+user+":"+password+"@"+ln.Addr().String()+"/hooks/catch/1234/"+path+"/?token="+query, callbackSecret))
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		var errs string
		testkit.Eventually(t, "failed delivery attempts recorded by River", func() bool {
			var n int
			if err := bundle.pool.QueryRow(context.Background(), `
SELECT coalesce(array_length(errors, 1), 0), coalesce(errors::text, '') FROM river_job WHERE kind = 'deliver_callback'`).Scan(&n, &errs); err != nil {
				t.Fatal(err)
			}
			return n >= 2
		})
		for _, secret := range []string{user, password, path, query, "/hooks/catch"} {
			if strings.Contains(errs, secret) {
				t.Errorf("River's job errors hold %q: %s", secret, errs)
			}
		}
		if !strings.Contains(errs, origin) {
			t.Errorf("River's job errors do not name the callback's origin %s: %s", origin, errs)
		}
		// The log is checked for the secrets when the test ends.
	})

	t.Run("GivesUpAfterTheMaxAge", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CallbackMaxAge: 500 * time.Millisecond})
		if err := bundle.fake.SetChaos(fake.Callback, fake.Chaos{FailRate: 1}); err != nil {
			t.Fatal(err)
		}
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		testkit.Eventually(t, "the delivery given up", func() bool {
			var n int
			_ = bundle.pool.QueryRow(context.Background(), `SELECT count(*) FROM callbacks WHERE lead_id = $1 AND given_up_at IS NOT NULL`, sub.LeadID).Scan(&n)
			return n == 1
		})
	})
}

// callbackURL is client-a's callback at the fake.
func (b *testBundle) callbackURL(t *testing.T) string {
	t.Helper()
	c, ok := b.callers.Set().Client(clientID)
	if !ok || c.Callback == nil {
		t.Fatal("client-a has no callback")
	}
	return c.Callback.URL
}

// mustCompact returns raw JSON without white space.
func mustCompact(t *testing.T, raw []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
