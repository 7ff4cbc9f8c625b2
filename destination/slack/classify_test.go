package slack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/slack"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
)

// answering serves one answer to every request.
func answering(t *testing.T, status int, header map[string]string, body string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// want is what an answer must be classified as.
type want struct {
	class     destination.Class
	uncertain bool
	hold      bool
	wait      time.Duration
}

func (w want) check(t *testing.T, err error, code string) {
	t.Helper()
	e := asError(t, err)
	if e.Class != w.class || e.Uncertain != w.uncertain || e.HoldAll != w.hold || e.RetryAfter != w.wait {
		t.Errorf("%v: class %s, uncertain %v, hold %v, retry after %v; want %s, %v, %v, %v",
			err, e.Class, e.Uncertain, e.HoldAll, e.RetryAfter, w.class, w.uncertain, w.hold, w.wait)
	}
	if code != "" && e.Code != code {
		t.Errorf("%v: code %q, want %q", err, e.Code, code)
	}
	requireClean(t, err, "FakeWebhookSecret")
}

var (
	isRejected     = want{class: destination.Rejected}
	isUnauthorized = want{class: destination.Unauthorized}
	isTransient    = want{class: destination.Transient}
	isUncertain    = want{class: destination.Transient, uncertain: true}
)

// TestWebAPIAnswers classifies Slack's documented answers to the bot's
// calls, as the contract says of each.
func TestWebAPIAnswers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		header map[string]string
		body   string
		code   string
		want   want
	}{
		// The contract's.
		{429, map[string]string{"Retry-After": "30"}, `{"ok":false,"error":"ratelimited"}`, "ratelimited",
			want{class: destination.Transient, hold: true, wait: 30 * time.Second}},
		{200, nil, `{"ok":false,"error":"channel_not_found"}`, "channel_not_found", isRejected},
		{200, nil, `{"ok":false,"error":"not_in_channel"}`, "not_in_channel", isRejected},
		{200, nil, `{"ok":false,"error":"is_archived"}`, "is_archived", isRejected},
		{200, nil, `{"ok":false,"error":"invalid_blocks","errors":["must be less than 3001 characters [json-pointer:/blocks/1/text/text]"]}`, "invalid_blocks", isRejected},
		{200, nil, `{"ok":false,"error":"msg_too_long"}`, "msg_too_long", isRejected},
		{200, nil, `{"ok":false,"error":"invalid_auth"}`, "invalid_auth", isUnauthorized},
		{200, nil, `{"ok":false,"error":"token_revoked"}`, "token_revoked", isUnauthorized},
		{200, nil, `{"ok":false,"error":"account_inactive"}`, "account_inactive", isUnauthorized},
		{200, nil, `{"ok":false,"error":"not_authed"}`, "not_authed", isUnauthorized},
		{200, nil, `{"ok":false,"error":"missing_scope","needed":"chat:write","provided":"channels:history"}`, "missing_scope", isUnauthorized},
		{503, nil, `<html><body>503 Service Unavailable</body></html>`, "", isUncertain},
		{500, nil, `{"ok":false,"error":"internal_error"}`, "internal_error", isUncertain},
		// Slack's other documented answers.
		{200, nil, `{"ok":false,"error":"token_expired"}`, "token_expired", isUnauthorized},
		{200, nil, `{"ok":false,"error":"no_permission"}`, "no_permission", isUnauthorized},
		{200, nil, `{"ok":false,"error":"accesslimited"}`, "accesslimited", isUnauthorized},
		{200, nil, `{"ok":false,"error":"msg_blocks_too_long"}`, "msg_blocks_too_long", isRejected},
		{200, nil, `{"ok":false,"error":"invalid_metadata_format"}`, "invalid_metadata_format", isRejected},
		{200, nil, `{"ok":false,"error":"restricted_action"}`, "restricted_action", isRejected},
		{200, nil, `{"ok":false,"error":"ekm_access_denied"}`, "ekm_access_denied", isRejected},
		{200, nil, `{"ok":false,"error":"method_deprecated"}`, "method_deprecated", isRejected},
		{200, nil, `{"ok":false,"error":"fatal_error"}`, "fatal_error", isUncertain},
		{200, nil, `{"ok":false,"error":"service_unavailable"}`, "service_unavailable", isUncertain},
		{200, nil, `{"ok":false,"error":"request_timeout"}`, "request_timeout", isTransient},
		{200, nil, `{"ok":false,"error":"team_added_to_org"}`, "team_added_to_org", isTransient},
		{200, map[string]string{"Retry-After": "5"}, `{"ok":false,"error":"rate_limited"}`, "rate_limited",
			want{class: destination.Transient, hold: true, wait: 5 * time.Second}},
		{200, nil, `{"ok":false,"error":"message_limit_exceeded"}`, "message_limit_exceeded",
			want{class: destination.Transient, hold: true, wait: time.Minute}},
		{429, nil, `{"ok":false,"error":"ratelimited"}`, "ratelimited", want{class: destination.Transient, hold: true, wait: time.Second}},
		// What Slack does not document: looked for, then tried again.
		{200, nil, `{"ok":false,"error":"something_new"}`, "something_new", isUncertain},
		{200, nil, `{"ok":false,"error":"Ada Lovelace <ada@ae.example>"}`, "", isUncertain},
		{200, nil, `{"ok":false}`, "", isUncertain},
		{200, nil, `not json`, "", isUncertain},
		{401, nil, `Unauthorized`, "", isUnauthorized},
		{302, map[string]string{"Location": "https://slack.com/"}, ``, "", isUncertain},
	} {
		t.Run(strings.Fields(tc.body + " _")[0], func(t *testing.T) {
			ch := build(t, botConfig(answering(t, tc.status, tc.header, tc.body)))
			_, err := ch.Send(ctx, record(), "")
			tc.want.check(t, err, tc.code)
		})
	}
}

// TestEveryCodeOfTheMethodsIsClassified: each code the methods' pages list
// has its class, and no answer of its is "unknown".
func TestEveryCodeOfTheMethodsIsClassified(t *testing.T) {
	ctx := context.Background()
	unauthorized := map[string]bool{}
	for _, c := range []string{"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive", "missing_scope",
		"no_permission", "not_allowed_token_type", "access_denied", "accesslimited", "app_access_restricted",
		"team_access_not_granted", "enterprise_is_restricted", "two_factor_setup_required", "is_bot"} {
		unauthorized[c] = true
	}
	transient := map[string]bool{}
	for _, c := range []string{"fatal_error", "internal_error", "service_unavailable", "update_failed", "request_timeout",
		"team_added_to_org", "org_login_required", "external_channel_migrating", "streaming_state_conflict",
		"ratelimited", "rate_limited", "message_limit_exceeded"} {
		transient[c] = true
	}
	for _, c := range slack.DocumentedCodes() {
		t.Run(c, func(t *testing.T) {
			ch := build(t, botConfig(answering(t, 200, nil, `{"ok":false,"error":"`+c+`"}`)))
			_, err := ch.Send(ctx, record(), "")
			e := asError(t, err)
			want := destination.Rejected
			switch {
			case unauthorized[c]:
				want = destination.Unauthorized
			case transient[c]:
				want = destination.Transient
			}
			if e.Class != want || e.Code != c || e.Err != nil {
				t.Errorf("%v: %s, want %s", err, e.Class, want)
			}
		})
	}
}

// TestWebhookAnswers classifies the plain-text errors of incoming
// webhooks.
func TestWebhookAnswers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		header map[string]string
		body   string
		want   want
	}{
		{400, nil, "invalid_payload", isRejected},
		{400, nil, "no_text", isRejected},
		{400, nil, "invalid_blocks", isRejected},
		{400, nil, "user_not_found", isRejected},
		{404, nil, "channel_not_found", isRejected},
		{410, nil, "channel_is_archived", isRejected},
		// A webhook revoked, removed or disabled: its URL is the
		// credential.
		{403, nil, "invalid_token", isUnauthorized},
		{403, nil, "action_prohibited", isUnauthorized},
		{403, nil, "posting_to_general_channel_denied", isUnauthorized},
		{404, nil, "no_service", isUnauthorized},
		{400, nil, "no_service_id", isUnauthorized},
		{400, nil, "no_team", isUnauthorized},
		{404, nil, "team_disabled", isUnauthorized},
		{404, nil, "no_active_hooks", isUnauthorized},
		{429, map[string]string{"Retry-After": "7"}, "rate_limited", want{class: destination.Transient, hold: true, wait: 7 * time.Second}},
		{429, nil, "", want{class: destination.Transient, hold: true, wait: time.Second}},
		{500, nil, "rollup_error", isUncertain},
		{502, nil, "<html>502 Bad Gateway</html>", isUncertain},
		{404, nil, "<html>Not Found</html>", isRejected},
		{401, nil, "", isUnauthorized},
	} {
		t.Run(tc.body, func(t *testing.T) {
			base := answering(t, tc.status, tc.header, tc.body)
			ch := build(t, &destination.Config{Name: "s", Kind: slack.Kind, Values: map[string]string{"webhook_url": base + slackfake.DefaultWebhook}})
			_, err := ch.Send(ctx, record(), "")
			code := tc.body
			if strings.HasPrefix(code, "<") {
				code = ""
			}
			tc.want.check(t, err, code)
		})
	}
	t.Run("ok", func(t *testing.T) {
		base := answering(t, 200, nil, "ok")
		ch := build(t, &destination.Config{Name: "s", Kind: slack.Kind, Values: map[string]string{"webhook_url": base + slackfake.DefaultWebhook}})
		if _, err := ch.Send(ctx, record(), ""); err != nil {
			t.Error(err)
		}
	})
}

// TestErrorsShowNoWebhookURL: a call that got no answer names the origin
// alone, never the webhook's path, its secret.
func TestErrorsShowNoWebhookURL(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	base := ts.URL
	ts.Close() // nothing listens there now
	ch := build(t, &destination.Config{Name: "s", Kind: slack.Kind, Timeout: time.Second,
		Values: map[string]string{"webhook_url": base + slackfake.DefaultWebhook}})
	_, err := ch.Send(context.Background(), record(), "")
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), "services") || strings.Contains(err.Error(), "FakeWebhookSecret") {
		t.Errorf("error %q shows the webhook's path", err)
	}
	if e := asError(t, err); e.Class != destination.Transient || e.Uncertain {
		t.Errorf("a refused connection: %v (uncertain %v)", err, e.Uncertain)
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, o *slackfake.Options, refuse bool) error {
		t.Helper()
		f, base, rec := recorded(t, o)
		f.SetRefuseCredentials(refuse)
		err := build(t, botConfig(base)).(destination.Checker).Check(ctx)
		if c := rec.last(t); c.Path != "/api/auth.test" || c.Auth != "Bearer "+token {
			t.Errorf("%s %s", c.Method, c.Path)
		}
		if n := len(f.Messages("")); n != 0 {
			t.Errorf("a check that posted %d messages", n)
		}
		requireClean(t, err)
		return err
	}
	if err := check(t, nil, false); err != nil {
		t.Errorf("a good token: %v", err)
	}
	if err := check(t, &slackfake.Options{Scopes: []string{"chat:write", "groups:history"}}, false); err != nil {
		t.Errorf("a token for a private channel: %v", err)
	}
	for _, tc := range []struct {
		name   string
		o      *slackfake.Options
		refuse bool
		want   string
	}{
		{"revoked", nil, true, "token_revoked"},
		{"wrong token", &slackfake.Options{Token: "xoxb-another"}, false, "invalid_auth"},
		{"no chat:write", &slackfake.Options{Scopes: []string{"channels:history"}}, false, "chat:write"},
		{"no history", &slackfake.Options{Scopes: []string{"chat:write"}}, false, "channels:history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, tc.o, tc.refuse)
			if e := asError(t, err); e.Class != destination.Unauthorized || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want unauthorized naming %s", err, tc.want)
			}
		})
	}
}
