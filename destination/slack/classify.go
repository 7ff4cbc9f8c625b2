package slack

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// verdict is what one of Slack's error codes means for the lead.
type verdict struct {
	class destination.Class
	// uncertain: the call may have been applied all the same.
	uncertain bool
	// hold: the answer holds every lead's calls to the destination, for
	// Retry-After, else for wait.
	hold bool
	wait time.Duration
}

var (
	rejected     = verdict{class: destination.Rejected}
	unauthorized = verdict{class: destination.Unauthorized}
	transient    = verdict{class: destination.Transient}
	maybeApplied = verdict{class: destination.Transient, uncertain: true}
)

// webAPICodes classifies every error Slack documents for the methods the
// kind calls (chat.postMessage, chat.update, conversations.history,
// auth.test), as the method pages list them:
//
//   - the token, its scopes, its workspace or its network refused (the
//     destination's credentials, not the lead: every lead waits, the
//     unauthorized alert fires);
//   - the channel or the message refused (the channel is given up for the
//     lead: asking again changes nothing);
//   - Slack's own trouble (transient; where Slack says some of it may have
//     succeeded, uncertain, so that the message is looked for before it is
//     sent again);
//   - its limits (transient, holding every lead's calls).
//
// A code it does not know is transient and may have been applied: looked
// for, then tried again, then given up like any transient failure.
var webAPICodes = map[string]verdict{
	// Credentials.
	"invalid_auth":              unauthorized,
	"not_authed":                unauthorized,
	"token_revoked":             unauthorized,
	"token_expired":             unauthorized,
	"account_inactive":          unauthorized,
	"missing_scope":             unauthorized,
	"no_permission":             unauthorized,
	"not_allowed_token_type":    unauthorized,
	"access_denied":             unauthorized,
	"accesslimited":             unauthorized,
	"app_access_restricted":     unauthorized,
	"team_access_not_granted":   unauthorized,
	"enterprise_is_restricted":  unauthorized,
	"two_factor_setup_required": unauthorized,
	"is_bot":                    unauthorized,
	"ekm_access_denied":         rejected, // the channel's: admins stopped posting to it

	// The channel, or the message.
	"channel_not_found":                         rejected,
	"not_in_channel":                            rejected,
	"is_archived":                               rejected,
	"is_inactive":                               rejected,
	"channel_is_limited_access":                 rejected,
	"team_not_found":                            rejected,
	"invalid_blocks":                            rejected,
	"invalid_blocks_format":                     rejected,
	"msg_too_long":                              rejected,
	"msg_blocks_too_long":                       rejected,
	"no_text":                                   rejected,
	"invalid_metadata_format":                   rejected,
	"invalid_metadata_schema":                   rejected,
	"metadata_too_large":                        rejected,
	"metadata_must_be_sent_from_app":            rejected,
	"too_many_attachments":                      rejected,
	"too_many_contact_cards":                    rejected,
	"attachment_payload_limit_exceeded":         rejected,
	"invalid_attachments":                       rejected,
	"markdown_text_conflict":                    rejected,
	"as_user_not_supported":                     rejected,
	"send_on_behalf_not_allowed":                rejected,
	"restricted_action":                         rejected,
	"restricted_action_read_only_channel":       rejected,
	"restricted_action_thread_only_channel":     rejected,
	"restricted_action_non_threadable_channel":  rejected,
	"restricted_action_thread_locked":           rejected,
	"cannot_reply_to_message":                   rejected,
	"messages_tab_disabled":                     rejected,
	"posting_to_channel_denied":                 rejected,
	"duplicate_channel_not_found":               rejected,
	"duplicate_message_not_found":               rejected,
	"slack_connect_canvas_sharing_blocked":      rejected,
	"slack_connect_file_link_sharing_blocked":   rejected,
	"slack_connect_lists_sharing_blocked":       rejected,
	"slack_connect_blocked_file_type":           rejected,
	"slack_connect_clip_sharing_blocked":        rejected,
	"slack_connect_file_upload_sharing_blocked": rejected,
	"missing_file_data":                         rejected,
	"blocked_file_type":                         rejected,
	"file_deleted":                              rejected,
	"file_is_deleted":                           rejected,
	"file_not_found":                            rejected,
	"file_share_limit_reached":                  rejected,
	"max_file_sharing_exceeded":                 rejected,
	"unable_to_share_files":                     rejected,
	"draft_already_deleted":                     rejected,
	"draft_already_sent":                        rejected,
	"draft_not_found":                           rejected,
	"draft_has_conflict":                        rejected,
	"block_mismatch":                            rejected,
	"cant_broadcast_message":                    rejected,
	"no_dual_broadcast_content_update":          rejected,
	// chat.update's own (Send answers them by posting a new message).
	"message_not_found":   rejected,
	"cant_update_message": rejected,
	"edit_window_closed":  rejected,
	// conversations.history's own.
	"invalid_cursor":               rejected,
	"invalid_ts_latest":            rejected,
	"invalid_ts_oldest":            rejected,
	"invalid_metadata_filter_keys": rejected,
	// A call the kind got wrong, or one Slack no longer has: asking again
	// changes nothing.
	"invalid_arguments":   rejected,
	"invalid_arg_name":    rejected,
	"invalid_array_arg":   rejected,
	"invalid_charset":     rejected,
	"invalid_form_data":   rejected,
	"invalid_post_type":   rejected,
	"missing_post_type":   rejected,
	"deprecated_endpoint": rejected,
	"method_deprecated":   rejected,
	"unknown_method":      rejected,

	// Slack's trouble.
	"fatal_error":                maybeApplied,
	"internal_error":             maybeApplied,
	"service_unavailable":        maybeApplied,
	"update_failed":              maybeApplied,
	"request_timeout":            transient, // the body arrived cut short: not applied
	"team_added_to_org":          transient,
	"org_login_required":         transient,
	"external_channel_migrating": transient,
	"streaming_state_conflict":   transient,

	// Limits.
	"ratelimited":            {class: destination.Transient, hold: true, wait: time.Second},
	"rate_limited":           {class: destination.Transient, hold: true, wait: 30 * time.Second},
	"message_limit_exceeded": {class: destination.Transient, hold: true, wait: time.Minute},
}

// webhookCodes classifies the plain-text errors of incoming webhooks (with
// their HTTP statuses: invalid_payload 400, invalid_token and
// action_prohibited 403, no_service and channel_not_found 404,
// channel_is_archived 410, 429). A webhook revoked, removed or disabled, or
// one its workspace no longer allows, is the destination's credentials: the
// URL is the credential.
var webhookCodes = map[string]verdict{
	"invalid_token":                     unauthorized,
	"no_service":                        unauthorized,
	"no_service_id":                     unauthorized,
	"no_team":                           unauthorized,
	"team_disabled":                     unauthorized,
	"no_active_hooks":                   unauthorized,
	"action_prohibited":                 unauthorized,
	"posting_to_general_channel_denied": unauthorized,
	"invalid_payload":                   rejected,
	"user_not_found":                    rejected,
	"channel_not_found":                 rejected,
	"channel_is_archived":               rejected,
	"no_text":                           rejected,
	"too_many_attachments":              rejected,
	"invalid_blocks":                    rejected,
	"invalid_blocks_format":             rejected,
	"msg_too_long":                      rejected,
	"msg_blocks_too_long":               rejected,
	"invalid_attachments":               rejected,
	"rollup_error":                      maybeApplied,
	"rate_limited":                      {class: destination.Transient, hold: true, wait: time.Second},
	"ratelimited":                       {class: destination.Transient, hold: true, wait: time.Second},
}

// code is the shape of an error code: a code that is not one is not shown.
var code = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// apiAnswer is the envelope of every Web API answer.
type apiAnswer struct {
	OK    *bool  `json:"ok"`
	Error string `json:"error"`
}

// apiError reads a Web API answer that is not a success: the error code
// of its body, or its status when it has none. ok reports a success.
func apiError(op string, resp *destination.Response, now time.Time) (ok bool, err *destination.Error) {
	var a apiAnswer
	readable := json.Unmarshal(resp.Body, &a) == nil && a.OK != nil
	switch {
	case readable && *a.OK && resp.OK():
		return true, nil
	case resp.Status == http.StatusTooManyRequests:
		return false, fromVerdict(op, resp, cmpCode(a.Error, "ratelimited"), webAPICodes["ratelimited"], now)
	case resp.Status >= 500 || !readable || a.Error == "":
		// Slack's edge answering for it (an HTML page, a gateway): by the
		// status alone.
		e := destination.StatusError(op, resp.Status, resp.Header, now)
		if readable && code.MatchString(a.Error) {
			e.Code = a.Error
		}
		switch {
		case resp.OK() && !readable:
			// A success we cannot read may have been applied.
			e.Class, e.Uncertain, e.Err = destination.Transient, true, errors.New("unreadable answer")
		case resp.OK():
			e.Class, e.Uncertain, e.Err = destination.Transient, true, errors.New("an answer without an error code")
		}
		return false, e
	}
	v, known := webAPICodes[a.Error]
	if !known {
		v = maybeApplied
	}
	e := fromVerdict(op, resp, a.Error, v, now)
	if !known {
		e.Err = errors.New("an error Slack does not document for the method")
	}
	return false, e
}

// webhookError classifies a webhook's answer that is not a 2xx by the code
// its plain-text body names, else by its status.
func webhookError(op string, resp *destination.Response, now time.Time) *destination.Error {
	c := strings.TrimSpace(string(resp.Body))
	if resp.Status == http.StatusTooManyRequests {
		return fromVerdict(op, resp, cmpCode(c, "rate_limited"), webhookCodes["rate_limited"], now)
	}
	if v, known := webhookCodes[c]; known && resp.Status < 500 {
		return fromVerdict(op, resp, c, v, now)
	}
	e := destination.StatusError(op, resp.Status, resp.Header, now)
	if code.MatchString(c) {
		e.Code = c
	}
	return e
}

// fromVerdict is the error of an answer whose code c means v.
func fromVerdict(op string, resp *destination.Response, c string, v verdict, now time.Time) *destination.Error {
	e := &destination.Error{Op: op, Status: resp.Status, Class: v.class, Uncertain: v.uncertain}
	if code.MatchString(c) {
		e.Code = c
	}
	if v.class == destination.Transient {
		e.RetryAfter = destination.ParseRetryAfter(resp.Header.Get("Retry-After"), now)
		if v.hold {
			if e.RetryAfter <= 0 {
				e.RetryAfter = v.wait
			}
			e.HoldAll = true
		}
	}
	return e
}

// cmpCode is c when it is a code, else def.
func cmpCode(c, def string) string {
	if code.MatchString(c) {
		return c
	}
	return def
}
