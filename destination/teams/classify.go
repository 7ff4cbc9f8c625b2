package teams

import (
	"encoding/json"
	"net/http"
	"regexp"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// opSend names the call in errors.
const opSend = "teams send"

// DefaultThrottle is how long a 429 without Retry-After holds the
// destination: Teams throttles a webhook beyond four requests a second
// until its window refreshes, so a short hold spares the other leads a
// burst of refusals.
const DefaultThrottle = 5 * time.Second

// The workflow's error codes the classification knows. Power Automate
// answers like Azure Logic Apps: {"error": {"code": ..., "message": ...}}.
const (
	// CodeTriggerNotEnabled (400): the flow is turned off, suspended (its
	// owner gone, a policy, a licence) or deleted; the message names the
	// state ("Could not execute workflow '…' trigger 'manual' with state
	// 'Disabled': trigger is not enabled.").
	CodeTriggerNotEnabled = "WorkflowTriggerIsNotEnabled"
	// CodeWorkflowNotFound (404): no such workflow (deleted, or a URL
	// mistyped).
	CodeWorkflowNotFound = "WorkflowNotFound"
	// CodeAuthorizationRequired (401): the URL has no sig (copied without
	// its query, or a trigger that only its tenant's users may call).
	CodeAuthorizationRequired = "DirectApiAuthorizationRequired"
	// CodeInvalidSignature (401): the sig is not the workflow's (the URL
	// was regenerated, or mistyped).
	CodeInvalidSignature = "DirectApiInvalidAuthorizationSignature"
	// CodeSchemaMismatch (400): the body does not match what the trigger
	// takes.
	CodeSchemaMismatch = "TriggerInputSchemaMismatch"
	// CodeThrottled (429): too many calls to the workflow.
	CodeThrottled = "WorkflowRequestsThrottled"
)

// codeRE is what an error code may be: a vendor's identifier, never a
// sentence that could quote the card.
var codeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.]{0,63}$`)

// Classify turns the trigger's answer into nil (200 or 202: the workflow
// took the card; 202 says no more, see the package's doc) or an
// *destination.Error:
//
//   - 401, 403 and 404 (a URL whose sig was regenerated, a workflow
//     deleted or its owner gone), and 400 WorkflowTriggerIsNotEnabled (a
//     workflow turned off or suspended) are refused credentials
//     (Unauthorized): the destination's state, not the lead's, so every lead
//     bound for it waits until the URL is corrected or the flow turned on.
//   - Any other 400, and 413 (the card over Teams' size), reject the card:
//     the channel is given up for the lead.
//   - 429 is transient and holds every lead's calls for its Retry-After
//     (DefaultThrottle without one).
//   - 408, 5xx, and anything else unexpected are transient; 5xx and
//     answers that are not errors (a redirect, another 2xx) may have posted
//     the card.
//
// The error's Code is the workflow's error code, never its message.
func Classify(resp *destination.Response, now time.Time) error {
	if resp.OK(http.StatusOK, http.StatusAccepted) {
		return nil
	}
	code := errorCode(resp.Body)
	e := destination.StatusError(opSend, resp.Status, resp.Header, now)
	e.Code = code
	switch s := resp.Status; {
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound,
		s == http.StatusBadRequest && code == CodeTriggerNotEnabled:
		e.Class, e.Uncertain, e.RetryAfter, e.HoldAll = destination.Unauthorized, false, 0, false
	case s == http.StatusTooManyRequests:
		if e.RetryAfter <= 0 {
			e.RetryAfter = DefaultThrottle
		}
		e.HoldAll = true
	case s == http.StatusConflict:
		// No documented meaning for a trigger: worth another attempt,
		// like any unexpected answer.
		e.Class, e.Uncertain = destination.Transient, true
	}
	return e
}

// errorCode reads {"error": {"code": ...}} from an answer's body; "" when
// there is none, or when it is not an identifier.
func errorCode(body []byte) string {
	var a struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &a) != nil || !codeRE.MatchString(a.Error.Code) {
		return ""
	}
	return a.Error.Code
}
