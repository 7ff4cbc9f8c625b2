package intake_test

import (
	"net/http"
	"testing"

	"github.com/leadintake/leadintake/internal/testkit"
)

// FuzzSubmit sends fuzzed bodies through the whole submit path, the real
// store included: whatever the body, the answer is never a 5xx, and a
// refused body leaves its key free.
func FuzzSubmit(f *testing.F) {
	for _, seed := range []string{
		validBody,
		`{"email":"ada@example.com","source":"website","name":"\u0000"}`,
		`{"email":"ada@example.com","source":"website","utm":{"\u0000":"x"}}`,
		`{"email":"ada@example.com","source":"website","message":"\ud83d\ude00 \u001f \u2028"}`,
		`{"email":"ada@example.com","source":"website","name":"\ud800"}`,
		`{"email":"a@b","source":"website","website":"http://[::1]:80/%00","consent":true,"utm":{}}`,
		`{"email":"ada@example.com","source":"website","phone":null,"utm":null,"consent":null}`,
		`{"email":"\"quoted\"@example.com","source":"referral","company":"\\\\"}`,
		`{"email":"ada@example.com","source":"website","message":1e400}`,
		"{\"email\":\"ada@example.com\",\"source\":\"website\",\"name\":\"\x00\"}",
	} {
		f.Add([]byte(seed))
	}
	api := newTestAPI(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		key := testkit.NewKey()
		res := api.send(t, api.submission(key, string(body)))
		switch {
		case res.Status >= 500:
			t.Fatalf("%d %s for body %q", res.Status, res.Body, body)
		case res.Status == http.StatusAccepted:
			res.requireAccepted(t, key, false)
		case keyStored(t, api.Pool, "a", key):
			t.Fatalf("%d %s stored its key, for body %q", res.Status, res.Body, body)
		}
	})
}
