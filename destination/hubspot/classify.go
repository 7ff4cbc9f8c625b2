package hubspot

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// Waits HubSpot's answers imply when they give none of their own.
const (
	// lockedWait: "423 Locked: wait at least 2 seconds" (error handling).
	lockedWait = 2 * time.Second
	// dailyLimitHold: the daily limit resets at midnight in the portal's
	// time zone, which no answer tells; the destination is held this long
	// at a time, and the call after it asks again.
	dailyLimitHold = 15 * time.Minute
)

// Rate-limit headers HubSpot sends with its answers.
const (
	headerRemaining      = "X-HubSpot-RateLimit-Remaining"
	headerInterval       = "X-HubSpot-RateLimit-Interval-Milliseconds"
	headerDailyRemaining = "X-HubSpot-RateLimit-Daily-Remaining"
)

// apiError is HubSpot's error body, and one error of a batch's answer. Every
// member is optional. Its message is never read into an error: HubSpot
// quotes the values it refused ("Email address … is invalid").
type apiError struct {
	Status   string `json:"status"`
	Message  string `json:"message"`
	Category string `json:"category"`
	// ErrorType and PolicyName come with a 429: RATE_LIMIT, and
	// TEN_SECONDLY_ROLLING, SECONDLY or DAILY.
	ErrorType  string `json:"errorType"`
	PolicyName string `json:"policyName"`
	Errors     []struct {
		Code string `json:"code"`
		// Error is the code in the older shape of a property's
		// validation result.
		Error   string          `json:"error"`
		Context json.RawMessage `json:"context"`
	} `json:"errors"`
}

// parseError reads what it can of an error body; nothing of one that is
// not HubSpot's JSON.
func parseError(body []byte) *apiError {
	var a apiError
	// A member of an unexpected type is skipped, the rest kept.
	_ = json.Unmarshal(body, &a)
	return &a
}

var (
	// codeToken is what a vendor code must look like to reach an error: an
	// identifier, nothing a lead could have typed into it.
	codeToken = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
	// propertyToken is a property's internal name.
	propertyToken = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,99}$`)
)

func safeCode(s string) string {
	if codeToken.MatchString(s) {
		return s
	}
	return ""
}

// code is the most specific code the error has: a property's (INVALID_EMAIL,
// PROPERTY_DOESNT_EXIST, MISSING_REQUIRED_PROPERTY, ...), the rate limit's
// policy, else its category.
func (a *apiError) code() string {
	for _, e := range a.Errors {
		if c := safeCode(e.Code); c != "" {
			return c
		}
		if c := safeCode(e.Error); c != "" {
			return c
		}
	}
	for _, v := range a.legacyResults() {
		if c := safeCode(v.Error); c != "" {
			return c
		}
	}
	for _, c := range []string{a.PolicyName, a.Category, a.ErrorType} {
		if c := safeCode(c); c != "" {
			return c
		}
	}
	return ""
}

// legacyResult is one result of the older shape, whose message embeds
// them: "Property values were not valid: [{"isValid":false,"message":…,
// "error":"INVALID_EMAIL","name":"email"}]". Only its code and property
// name are read.
type legacyResult struct {
	Error string `json:"error"`
	Name  string `json:"name"`
}

func (a *apiError) legacyResults() []legacyResult {
	i := strings.Index(a.Message, "[{")
	if i < 0 {
		return nil
	}
	var out []legacyResult
	if json.Unmarshal([]byte(a.Message[i:]), &out) != nil {
		return nil
	}
	return out
}

// detail names the category (when the code is more specific) and the
// properties at fault: what an operator needs, no value of the lead's.
func (a *apiError) detail(code string) error {
	var parts []string
	if c := safeCode(a.Category); c != "" && c != code {
		parts = append(parts, c)
	}
	var props []string
	add := func(name string) {
		if propertyToken.MatchString(name) && len(props) < 5 && !contains(props, name) {
			props = append(props, name)
		}
	}
	for _, e := range a.Errors {
		var ctx struct {
			PropertyName []string `json:"propertyName"`
		}
		if json.Unmarshal(e.Context, &ctx) == nil {
			for _, p := range ctx.PropertyName {
				add(p)
			}
		}
	}
	for _, v := range a.legacyResults() {
		add(v.Name)
	}
	if len(props) > 0 {
		parts = append(parts, "property "+strings.Join(props, ", "))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, ", "))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// classify turns an answer that is not the call's success into an error.
// It starts from the status (destination.StatusError) and adds what HubSpot
// says of its own:
//   - 429, or category RATE_LIMITS: transient, every lead's calls held
//     (rateLimited);
//   - 423 Locked: transient, after at least 2 s, this lead's alone;
//   - 477 Migration in Progress: transient, every lead's calls held for
//     its Retry-After (the portal moves between data centres);
//   - 409 to an upsert: transient, nothing applied (a contact with the
//     email being made at the same moment); to an update, rejected (the
//     amended email is another contact's);
//   - 404 to an update whose body says OBJECT_NOT_FOUND: rejected (no such
//     contact); any other 404 is a path HubSpot does not have (base_url,
//     or the API version), the destination's fault, not the lead's:
//     transient;
//   - 401 and 403 (INVALID_AUTHENTICATION, MISSING_SCOPES) refuse the
//     credentials; any other 4xx (VALIDATION_ERROR...) rejects the lead;
//     5xx are transient and may have been applied.
func classify(op string, resp *destination.Response, now time.Time) *destination.Error {
	a := parseError(resp.Body)
	e := destination.StatusError(op, resp.Status, resp.Header, now)
	e.Code = a.code()
	e.Err = a.detail(e.Code)
	switch {
	case resp.Status == http.StatusTooManyRequests, a.Category == "RATE_LIMITS", a.ErrorType == "RATE_LIMIT":
		rateLimited(e, resp.Header, a.PolicyName, now)
	case resp.Status == http.StatusLocked:
		e.Class, e.Uncertain, e.HoldAll = destination.Transient, false, false
		e.RetryAfter = max(destination.ParseRetryAfter(resp.Header.Get("Retry-After"), now), lockedWait)
	case resp.Status == 477:
		e.Class, e.Uncertain = destination.Transient, false
		e.RetryAfter = destination.ParseRetryAfter(resp.Header.Get("Retry-After"), now)
		e.HoldAll = e.RetryAfter > 0
	case resp.Status == http.StatusConflict && op == opUpsert:
		e.Class, e.Uncertain = destination.Transient, false
	case resp.Status == http.StatusConflict:
		e.Class, e.Uncertain = destination.Rejected, false
	case resp.Status == http.StatusNotFound && !(op == opUpdate && a.Category == "OBJECT_NOT_FOUND"):
		e.Class = destination.Transient
		e.Err = errors.New("no such path at HubSpot: check base_url")
	}
	return e
}

// classifyBatchError turns the error a batch's answer (207) gives for the
// lead's input into an error: rejected, but for a rate limit, and a
// conflict on the email (transient, as a 409).
func classifyBatchError(op string, resp *destination.Response, a apiError, now time.Time) *destination.Error {
	e := &destination.Error{Op: op, Status: resp.Status, Class: destination.Rejected, Code: a.code()}
	e.Err = a.detail(e.Code)
	switch a.Category {
	case "RATE_LIMITS":
		rateLimited(e, resp.Header, a.PolicyName, now)
	case "CONFLICT":
		e.Class = destination.Transient
	}
	return e
}

// rateLimited makes e a rate limit: transient, nothing applied, and every
// lead's calls held for as long as HubSpot says: the interval of
// X-HubSpot-RateLimit-Interval-Milliseconds when X-HubSpot-RateLimit-
// Remaining is 0, Retry-After, whichever is longer; else the policy's own
// window (10 s, 1 s); the daily limit for dailyLimitHold.
func rateLimited(e *destination.Error, h http.Header, policy string, now time.Time) {
	e.Class, e.Uncertain = destination.Transient, false
	wait := destination.ParseRetryAfter(h.Get("Retry-After"), now)
	if h.Get(headerRemaining) == "0" {
		if ms, err := strconv.ParseInt(h.Get(headerInterval), 10, 64); err == nil && ms > 0 {
			wait = max(wait, time.Duration(min(ms, int64(destination.MaxRetryAfter/time.Millisecond)))*time.Millisecond)
		}
	}
	if wait == 0 {
		switch policy {
		case "TEN_SECONDLY_ROLLING":
			wait = 10 * time.Second
		case "SECONDLY":
			wait = time.Second
		}
	}
	if policy == "DAILY" || h.Get(headerDailyRemaining) == "0" {
		wait = max(wait, dailyLimitHold)
	}
	e.RetryAfter = min(wait, destination.MaxRetryAfter)
	e.HoldAll = e.RetryAfter > 0
}
