package intake

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/webhook"
)

// handleWebhookLead is POST /v1/webhooks/{client_id}/leads: a sender that
// signs its webhooks the Standard Webhooks way, with the client's
// webhook_secret, submits an enquiry without a bearer token. The signature
// (checked in constant time, with a timestamp at most five minutes away)
// authenticates it; the webhook-id is the Idempotency-Key. A Supersedes
// header is refused: it is outside the signature, so anyone who relays the
// message could aim it at any key of the client. Everything else is POST
// /v1/leads.
func handleWebhookLead(sub *submitter, holder *callers.Holder) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		clientID, ok := pathParam(c, "client_id")
		client, known := holder.Set().Client(clientID)
		if !ok || !known || client.WebhookSecret.IsZero() {
			return response.Errorf(response.CodeNotFound, "no client with signed webhooks here")
		}
		body, err := readBody(c, sub.maxBody)
		if err != nil {
			return err
		}
		key, err := webhook.Verify([]webhook.Secret{client.WebhookSecret}, req.Header, body, time.Now(), webhook.DefaultTolerance)
		switch {
		case errors.Is(err, webhook.ErrMissingID):
			return response.Errorf(response.CodeKeyMissing, "the webhook-id header, the Idempotency-Key of a signed webhook, is required")
		case err != nil:
			return &response.Error{Code: response.CodeSignatureInvalid,
				Message: "the webhook-signature does not verify, or webhook-timestamp is more than five minutes away", Err: err}
		}
		if _, sent := req.Header[http.CanonicalHeaderKey("Supersedes")]; sent {
			e := response.Errorf(response.CodeSupersedesInvalid, "a signed webhook cannot carry Supersedes: the header is not covered by its signature")
			e.Status = http.StatusBadRequest
			return e
		}
		if err := checkKey(key); err != nil {
			err.Message = "the webhook-id is the Idempotency-Key: " + err.Message
			return err
		}
		requestOf(c).clientID = clientID
		requestOf(c).ref = ExternalRef(clientID, key)
		if err := requireJSON(req); err != nil {
			return err
		}
		return sub.submit(c, clientID, key, body)
	}
}
