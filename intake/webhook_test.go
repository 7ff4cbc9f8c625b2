package intake_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/webhook"
)

// signed returns POST /v1/webhooks/{client}/leads of body with webhook-id
// id, signed at ts with secret (the zero Secret: unsigned).
func (a *testAPI) signed(client, id, body string, ts time.Time, secret webhook.Secret) *http.Request {
	req, err := http.NewRequest(http.MethodPost, a.URL+"/v1/webhooks/"+client+"/leads", bytes.NewBufferString(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if !secret.IsZero() {
		webhook.SetHeaders(req.Header, secret, id, ts, []byte(body))
	} else if id != "" {
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	}
	return req
}

func TestSignedWebhooks(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	secret, err := webhook.ParseSecret(webhookSecretA)
	if err != nil {
		t.Fatal(err)
	}
	other, err := webhook.ParseSecret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("SubmitsUnderTheWebhookID", func(t *testing.T) {
		t.Parallel()
		id := "msg_" + testkit.NewKey()
		api.send(t, api.signed("a", id, validBody, time.Now(), secret)).requireAccepted(t, id, false)
		// A redelivery of the same message is a replay.
		api.send(t, api.signed("a", id, validBody, time.Now(), secret)).requireAccepted(t, id, true)
		// It is the client's key like any other.
		if op := api.send(t, api.operation(tokenA, id)); op.Status != http.StatusOK {
			t.Errorf("GET the webhook's operation: %d", op.Status)
		}
	})

	t.Run("AnySignatureOfTheListMatches", func(t *testing.T) {
		t.Parallel()
		id := "msg_" + testkit.NewKey()
		req := api.signed("a", id, validBody, time.Now(), secret)
		good := req.Header.Get("webhook-signature")
		req.Header.Set("webhook-signature", webhook.Sign(other, id, time.Now(), []byte(validBody))+" "+good)
		api.send(t, req).requireAccepted(t, id, false)
	})

	t.Run("RefusesBadSignatures", func(t *testing.T) {
		t.Parallel()
		for name, req := range map[string]*http.Request{
			"WrongSecret":   api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now(), other),
			"Unsigned":      api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now(), webhook.Secret{}),
			"TooOld":        api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now().Add(-6*time.Minute), secret),
			"FromTheFuture": api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now().Add(6*time.Minute), secret),
			"BearerInstead": func() *http.Request {
				r := api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now(), webhook.Secret{})
				r.Header.Set("Authorization", "Bearer "+tokenA)
				return r
			}(),
		} {
			res := api.send(t, req)
			if _, err := res.error(http.StatusUnauthorized, response.CodeSignatureInvalid); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if keyStored(t, api.Pool, "a", req.Header.Get("webhook-id")) {
				t.Errorf("%s: the refused webhook stored its key", name)
			}
		}
		// Another body under the signature of the first does not verify.
		signedFor := api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now(), secret)
		tampered := api.signed("a", "", otherBody, time.Now(), webhook.Secret{})
		tampered.Header = signedFor.Header.Clone()
		api.send(t, tampered).requireError(t, http.StatusUnauthorized, response.CodeSignatureInvalid)
	})

	t.Run("TheWebhookIDFollowsTheKeyRules", func(t *testing.T) {
		t.Parallel()
		req := api.signed("a", "x", validBody, time.Now(), secret)
		req.Header.Del("webhook-id")
		api.send(t, req).requireError(t, http.StatusBadRequest, response.CodeKeyMissing)
		api.send(t, api.signed("a", "555-123-4567", validBody, time.Now(), secret)).requireError(t, http.StatusBadRequest, response.CodeKeyInvalid)
		api.send(t, api.signed("a", "msg with spaces", validBody, time.Now(), secret)).requireError(t, http.StatusBadRequest, response.CodeKeyInvalid)
	})

	t.Run("UnknownClientsAndClientsWithoutSecret", func(t *testing.T) {
		t.Parallel()
		for _, client := range []string{"b", "nobody", "a%2Fb"} {
			api.send(t, api.signed(client, "msg_"+testkit.NewKey(), validBody, time.Now(), secret)).requireError(t, http.StatusNotFound, response.CodeNotFound)
		}
	})

	t.Run("RefusesSupersedes", func(t *testing.T) {
		t.Parallel()
		// The header is outside the signature: whoever relays a signed
		// webhook could aim it at any key of the client.
		earlier := "msg_" + testkit.NewKey()
		api.send(t, api.signed("a", earlier, validBody, time.Now(), secret)).requireAccepted(t, earlier, false)
		for _, value := range []string{earlier, "not a key", ""} {
			id := "msg_" + testkit.NewKey()
			req := api.signed("a", id, otherBody, time.Now(), secret)
			req.Header["Supersedes"] = []string{value}
			api.send(t, req).requireError(t, http.StatusBadRequest, response.CodeSupersedesInvalid)
			if keyStored(t, api.Pool, "a", id) {
				t.Errorf("Supersedes %q: the refused webhook stored its key", value)
			}
		}
	})

	t.Run("EverythingElseIsASubmission", func(t *testing.T) {
		t.Parallel()
		api.send(t, api.signed("a", "msg_"+testkit.NewKey(), `{"email":"x"}`, time.Now(), secret)).
			requireError(t, http.StatusUnprocessableEntity, response.CodeValidationFailed)
		req := api.signed("a", "msg_"+testkit.NewKey(), validBody, time.Now(), secret)
		req.Header.Set("Content-Type", "text/plain")
		api.send(t, req).requireError(t, http.StatusUnsupportedMediaType, response.CodeUnsupportedMediaType)
	})
}
