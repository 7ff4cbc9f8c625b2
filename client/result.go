package client

import (
	"encoding/json"
	"errors"
	"time"
)

// Operation states, as GET /v1/operations/{key} reports them.
const (
	StateProcessing          = "processing"
	StateNeedsReconciliation = "needs_reconciliation"
	StateCompleted           = "completed"
	StateFailed              = "failed"
)

// Result is the final answer of a lead that the CRM accepted: the key's
// final response, 201 {"status": "completed", ...}.
type Result struct {
	// Key is the enquiry's idempotency key.
	Key string `json:"-"`
	// StatusCode is the final response's status (201).
	StatusCode int `json:"-"`
	// Body is the final response's body, byte for byte as the service
	// stored it: every later submission of the key gets these bytes.
	Body json.RawMessage `json:"-"`

	Status   string   `json:"status"`
	LeadID   string   `json:"lead_id"`
	CRMID    string   `json:"crm_id"`
	Score    int      `json:"score"`
	Tier     string   `json:"tier"`
	Notified bool     `json:"notified"`
	Warnings []string `json:"warnings"`
	// Amends is the lead id of the enquiry this one amended ("" when it
	// amended none).
	Amends string `json:"amends"`
}

// Operation is one key as GET /v1/operations/{key} reports it.
type Operation struct {
	Key   string `json:"idempotency_key"`
	State string `json:"state"`
	// LeadID is the key's lead.
	LeadID    string     `json:"lead_id"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	// Response is the key's final response; nil while it is unfinished.
	Response *FinalResponse `json:"response"`
	// Supersedes is the key this one amends; SupersededBy the key that
	// amends this one ("" for none, and from servers that do not report
	// them).
	Supersedes   string `json:"supersedes"`
	SupersededBy string `json:"superseded_by"`
	// Raw is the whole answer, as received.
	Raw json.RawMessage `json:"-"`
}

// Finished reports whether the key has its final response.
func (o *Operation) Finished() bool { return o.Response != nil }

// FinalResponse is a finished key's stored response.
type FinalResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// processing is the 202 body of a submission in progress.
type processing struct {
	Status    string `json:"status"`
	Key       string `json:"idempotency_key"`
	LeadID    string `json:"lead_id"`
	StatusURL string `json:"status_url"`
}

// finalBody is the part of a final response that tells completed from
// failed.
type finalBody struct {
	Status string `json:"status"`
	LeadID string `json:"lead_id"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errNotFinal is final's answer for a body that is not a final response.
var errNotFinal = errors.New("not a final response")

// final turns a key's final response into the Result or the *Failed that
// Submit and Wait return, and returns errNotFinal when body is not a final
// response.
func final(key string, status int, body []byte) (*Result, error) {
	var fb finalBody
	if json.Unmarshal(body, &fb) != nil || fb.LeadID == "" {
		return nil, errNotFinal
	}
	switch fb.Status {
	case StateCompleted:
		r := &Result{}
		if json.Unmarshal(body, r) != nil {
			return nil, errNotFinal
		}
		r.Key, r.StatusCode, r.Body = key, status, append(json.RawMessage(nil), body...)
		return r, nil
	case StateFailed:
		f := &Failed{Key: key, StatusCode: status, LeadID: fb.LeadID, Body: append(json.RawMessage(nil), body...)}
		if fb.Error != nil {
			f.Code, f.Message = fb.Error.Code, fb.Error.Message
		}
		return nil, f
	}
	return nil, errNotFinal
}
