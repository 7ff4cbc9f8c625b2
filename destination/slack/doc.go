// Package slack is the destination kind slack: a lead announced in a Slack
// channel, by an app of the operator's own, in one of two modes.
//
// With a bot token (members token and channel, the channel's ID) the
// message is posted with
//
//	POST {base}/api/chat.postMessage   (Authorization: Bearer <token>)
//	{"channel", "text", "blocks", "metadata": {"event_type": "leadintake_lead",
//	 "event_payload": {"lead_id", "external_ref"}}, "parse": "none", ...}
//
// ({base}: https://slack.com, or base_url), and its answer's ts is the
// receipt the lead keeps. An amendment whose chain already has a message
// updates it (POST /api/chat.update with channel, ts and the amendment's
// metadata, so that the message now names the amendment's lead), or posts
// one of its own when Slack no longer has that message or will not let it
// be edited (message_not_found, cant_update_message, edit_window_closed).
// After an outcome that may have been applied, Find reads the channel's
// history since the first attempt (GET /api/conversations.history with
// oldest, include_all_metadata and cursor, at most ten pages of 200) for a
// message whose metadata names the lead's reference and its lead id: a
// found message is the acceptance, so the bot posts exactly once; an
// amendment's update is found only once it was applied, and an update
// repeated is the same message. Check calls auth.test and reads the
// token's scopes from X-OAuth-Scopes.
//
// With an incoming webhook (member webhook_url, a secret: the URL is the
// credential) the message is posted to the URL and Slack answers 200 ok
// and nothing more: no ts, no history, no check that would not post.
// After a lost answer it is posted again (at least once), and an
// amendment is a message of its own.
//
// The message (NewMessage) is Block Kit blocks and a fallback text (what
// phones and screen readers show: tier, company, name, score). Every value
// of the visitor's is cleaned, escaped (&, <, >: no mention, ping or link
// can be spelled) and put in plain_text objects only (no mrkdwn formatting,
// no emoji shortcode), each cut to its share of Slack's limits with an
// ellipsis (50 blocks, 3,000 characters a section, 2,000 a field, 150 a
// header, about 13,000 for the blocks together, 4,000 for an edit's
// text), whatever the visitor sent. The owner's mention <@ID> is the only
// mention the message makes.
//
// Each answer is classified here (see classify): Slack's documented error
// codes of the four methods, every one of them, and the webhooks'
// plain-text errors with their statuses. ratelimited (429, Retry-After)
// holds every lead's calls; channel_not_found, not_in_channel,
// is_archived, invalid_blocks, msg_too_long and the other refusals of the
// channel or the message give the channel up for the lead; invalid_auth,
// token_revoked, account_inactive, not_authed, missing_scope and the other
// refusals of the token (and a webhook revoked, removed or disabled:
// invalid_token, no_service, action_prohibited...) are refused
// credentials; 5xx, and Slack's own fatal_error or internal_error, are
// transient and may have been applied. No SDK is used: Slack's SDKs retry a
// post on their own.
//
// Pages relied on (read 2026-12):
//   - https://docs.slack.dev/reference/methods/chat.postMessage
//   - https://docs.slack.dev/reference/methods/chat.update (metadata: "If you don't include this field, the message's previous metadata will be retained")
//   - https://docs.slack.dev/reference/methods/conversations.history
//   - https://docs.slack.dev/reference/methods/auth.test
//   - https://github.com/slack-ruby/slack-api-ref (the methods' arguments and error lists, as Slack's pages give them, 2026-08)
//   - https://docs.slack.dev/messaging/message-metadata
//   - https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks
//   - https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks
//   - https://docs.slack.dev/messaging/formatting-message-text (escaping &, <, >)
//   - https://docs.slack.dev/reference/block-kit/blocks/header-block
//   - https://docs.slack.dev/reference/block-kit/blocks/section-block
//   - https://docs.slack.dev/reference/block-kit/composition-objects/text-object (verbatim, emoji)
//   - https://docs.slack.dev/apis/web-api/rate-limits (chat.postMessage about 1 a second per channel; conversations.history for commercially distributed apps outside the Marketplace since 2025-05-29)
//   - https://github.com/slackapi/bolt-js/issues/2509 (msg_blocks_too_long from about 13,000 characters of blocks)
//   - https://github.com/Automattic/matrix-appservice-slack/pull/8 (conversations.history returns the metadata's payload with include_all_metadata=true)
package slack
