package salesforce

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// apiError is one error of Salesforce's error body, a list of them. Its
// message may quote a value of the lead: it is never shown.
type apiError struct {
	Message   string   `json:"message"`
	ErrorCode string   `json:"errorCode"`
	Fields    []string `json:"fields"`
}

// Error codes and what they mean for the lead.
var (
	// rejectedCodes refuse the lead itself: asking again changes nothing.
	rejectedCodes = map[string]bool{
		"DUPLICATES_DETECTED":               true, // a Block duplicate rule (Alert rules pass: allowSave)
		"DUPLICATE_VALUE":                   true, // another unique field of the Lead holds the value
		"REQUIRED_FIELD_MISSING":            true,
		"FIELD_CUSTOM_VALIDATION_EXCEPTION": true, // an org's validation rule
		"INVALID_FIELD":                     true, // a map names a field Lead does not have
		"CANNOT_UPDATE_CONVERTED_LEAD":      true,
	}
	// transientCodes are worth another attempt; nothing was written.
	transientCodes = map[string]bool{
		"UNABLE_TO_LOCK_ROW": true, // another transaction holds the record
	}
)

const codeRequestLimit = "REQUEST_LIMIT_EXCEEDED"

// errorCode is the shape of a Salesforce error code; anything else is not
// shown. fieldRE is a field's API name.
var (
	errorCode = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
	fieldRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,120}$`)
)

// parseErrors reads Salesforce's error body: a list of errors, or one.
func parseErrors(body []byte) []apiError {
	var list []apiError
	if json.Unmarshal(body, &list) == nil {
		return list
	}
	var one apiError
	if json.Unmarshal(body, &one) == nil && one.ErrorCode != "" {
		return []apiError{one}
	}
	return nil
}

// pick is the error that decides: the first whose code the kind knows,
// else the first.
func pick(errs []apiError) apiError {
	for _, e := range errs {
		if c := e.ErrorCode; rejectedCodes[c] || transientCodes[c] || c == codeRequestLimit {
			return e
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return apiError{}
}

// answerError classifies an answer that is not the call's success, from
// its status (destination.StatusError: 5xx transient and uncertain, 401
// and 403 refused credentials, other 4xx rejected) refined by its error
// code:
//
//   - 300 (several Leads under the reference) and the codes of
//     rejectedCodes reject the lead, with the code in the message;
//   - DUPLICATE_VALUE on ref_field itself is a concurrent first write of
//     the same reference that made the Lead: transient, and the next
//     upsert updates it;
//   - UNABLE_TO_LOCK_ROW is transient;
//   - REQUEST_LIMIT_EXCEEDED, and a 403 while Sforce-Limit-Info says the
//     allocation is spent, is the org's API limit: transient, holding
//     every lead's calls for LimitHold; so is any transient answer while
//     the allocation is spent;
//   - any other 403 is refused permission (Unauthorized).
//
// The error names the status, the code and the fields at fault, never the
// vendor's message (it may quote the lead).
func (c *CRM) answerError(op string, resp *destination.Response) *destination.Error {
	e := destination.StatusError(op, resp.Status, resp.Header, time.Now())
	first := pick(parseErrors(resp.Body))
	code := first.ErrorCode
	if !errorCode.MatchString(code) {
		code = ""
	}
	e.Code = code
	spent := usageSpent(resp.Header)
	switch {
	case resp.Status == http.StatusMultipleChoices:
		e.Class, e.Uncertain, e.Code = destination.Rejected, false, "MULTIPLE_CHOICES"
		e.Err = errors.New("several Leads under the reference")
	case code == codeRequestLimit, resp.Status == http.StatusForbidden && spent:
		e.Class, e.Uncertain = destination.Transient, false
		limitHold(e)
	case code == "DUPLICATE_VALUE" && c.namesRefField(first):
		e.Class, e.Uncertain = destination.Transient, false
		e.Err = errors.New("the reference was written at the same time by another call")
	case rejectedCodes[code]:
		e.Class, e.Uncertain = destination.Rejected, false
	case transientCodes[code]:
		e.Class, e.Uncertain = destination.Transient, false
	}
	if e.Class == destination.Transient && spent {
		limitHold(e)
	}
	if e.Err == nil {
		if names := safeFields(first.Fields); len(names) > 0 {
			e.Err = fmt.Errorf("fields %s", strings.Join(names, ", "))
		}
	}
	return e
}

// limitHold makes e hold every lead's calls for at least LimitHold.
func limitHold(e *destination.Error) {
	e.HoldAll = true
	e.RetryAfter = max(e.RetryAfter, LimitHold)
}

// namesRefField reports whether a DUPLICATE_VALUE error is about ref_field:
// its fields name it, or (as Salesforce often leaves fields empty) its
// message does ("duplicate value found: <field> duplicates value on record
// with id: ...").
func (c *CRM) namesRefField(e apiError) bool {
	for _, f := range e.Fields {
		if strings.EqualFold(f, c.refField) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(e.Message), strings.ToLower(c.refField))
}

// safeFields are the field names of an error that look like field names,
// at most five.
func safeFields(fields []string) []string {
	var out []string
	for _, f := range fields {
		if fieldRE.MatchString(f) && len(out) < 5 {
			out = append(out, f)
		}
	}
	return out
}

// usageSpent reports whether the answer's Sforce-Limit-Info says the org's
// API allocation is spent: api-usage=N/M with N >= M.
func usageSpent(h http.Header) bool {
	used, limit, ok := APIUsage(h)
	return ok && limit > 0 && used >= limit
}

// APIUsage reads Sforce-Limit-Info's api-usage=N/M (N calls used of the
// org's M in its rolling 24 hours); ok is false when the answer has none.
func APIUsage(h http.Header) (used, limit int, ok bool) {
	for part := range strings.SplitSeq(h.Get("Sforce-Limit-Info"), ";") {
		v, found := strings.CutPrefix(strings.TrimSpace(part), "api-usage=")
		if !found {
			continue
		}
		n, m, found := strings.Cut(v, "/")
		used, err1 := strconv.Atoi(strings.TrimSpace(n))
		limit, err2 := strconv.Atoi(strings.TrimSpace(m))
		if found && err1 == nil && err2 == nil {
			return used, limit, true
		}
	}
	return 0, 0, false
}
