// Package teams is the destination kind teams: a Microsoft Teams channel,
// reached through a Teams workflow (Power Automate) whose trigger is "When
// a Teams webhook request is received" and whose action posts each card of
// the request to the channel, as the Workflows template "Post to a channel
// when a webhook request is received" builds it. Office 365 connectors'
// incoming webhooks, which the kind replaces, are retired.
//
// The kind takes one member, webhook_url: the trigger's URL, whose sig=
// query signs it. The URL is the credential, so it is a secret: it never
// reaches an error, a log line or a span (an error names its origin
// alone). With base_url, the call goes to base_url followed by the URL's
// path and query (a proxy, a stand-in).
//
// # The call
//
// POST webhook_url with a Bot Framework message holding one Adaptive Card
// (version 1.4): {"type": "message", "attachments": [{"contentType":
// "application/vnd.microsoft.card.adaptive", "contentUrl": null,
// "content": {…}}]}. The card carries the facts every notification carries
// (lead id, tier, score, name, company, email, phone, source, owner when
// assigned, amends and duplicate_of when set), the lead's message cut at
// 1,000 characters, and, in its last TextBlock (id FooterID), the lead's
// id and reference, so that a person, or a test, can tell which lead a
// card announces.
//
// # Escaping
//
// Teams renders a TextBlock's text and a fact's title and value as
// Markdown (a CommonMark subset: bold, italic, lists, links), and a
// TextBlock replaces {{DATE()}} and {{TIME()}}. Every visitor-supplied
// value is made one line (controls, separators and runs of white space
// become one space; bidirectional overrides and isolates are removed), cut
// at its bound, and every ASCII punctuation character escaped with a
// backslash (see Escape): the card shows it literally, and no visitor text
// becomes formatting, a link, a mention or an action. The card has no
// action and no link of its own: the lead's website is not on it.
//
// # Answers
//
// The trigger answers 202 Accepted as soon as it has started the flow's
// run, before the card is posted (a workflow without a Response action
// answers at once): 202, or 200 from a flow that answers itself, is
// acceptance, and says no more. A card the channel then refuses fails the
// run, out of the caller's sight (the flow's run history shows it). See
// Classify for the rest: a URL whose signature no longer holds (401), a
// workflow deleted (404) or turned off or suspended (400
// WorkflowTriggerIsNotEnabled) is refused credentials, which hold every
// lead bound for the destination; another 400 or 413 rejects the card;
// 429 holds the destination for its Retry-After; 5xx is transient.
//
// # Guarantee
//
// At least once. The trigger takes no idempotency key and nothing here
// reads the channel back (Capabilities: no find, no update), so a repeat
// after a lost answer (a time-out, a broken connection, a 5xx) posts the
// card again; an amendment is announced in a card of its own, "Amended
// lead".
//
// No Check: a webhook cannot be called without posting, so `worker
// destinations check` says "ok (not checkable without sending)".
//
// # Pages relied on
//
//   - Create incoming webhooks (Workflows instead of connectors; known
//     issues: no post to private channels as the Flow bot; 28 KB; four
//     requests a second):
//     https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook
//   - Create incoming webhooks with Workflows for Microsoft Teams:
//     https://support.microsoft.com/office/create-incoming-webhooks-with-workflows-for-microsoft-teams-8ae491c7-0394-4861-ba59-055e33f75498
//   - Microsoft Teams connector (message size about 28 KB, "Request Entity
//     too large"; the webhook trigger): https://learn.microsoft.com/connectors/teams/
//   - Workflows in Teams: https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/create-workflows
//   - Retirement of Office 365 connectors within Microsoft Teams:
//     https://devblogs.microsoft.com/microsoft365dev/retirement-of-office-365-connectors-within-microsoft-teams/
//   - Format cards in Teams (Markdown in TextBlock, Fact.Title and
//     Fact.Value; no HTML):
//     https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/cards-format
//   - Adaptive Cards text features (CommonMark subset; DATE and TIME):
//     https://learn.microsoft.com/adaptive-cards/authoring-cards/text-features
//   - Call workflows with HTTPS endpoints (the sig, a Shared Access
//     Signature; 202 Accepted at once without a Response action):
//     https://learn.microsoft.com/azure/logic-apps/logic-apps-http-endpoint
//   - Share a cloud flow (co-owners; a flow keeps running while it has an
//     active owner): https://learn.microsoft.com/power-automate/create-team-flows
//   - 202 proves nothing of the post: https://github.com/fluxcd/flagger/issues/1887
//   - The trigger's refusals as callers meet them: 401
//     DirectApiAuthorizationRequired for a URL without its sig and 202
//     otherwise (https://github.com/ericferon/glpi-webhook/issues/51); 400
//     WorkflowTriggerIsNotEnabled "… with state 'Disabled' | 'Suspended' |
//     'Deleted': trigger is not enabled." for a flow turned off, suspended
//     or deleted, and 401 DirectApiInvalidAuthorizationSignature, 404
//     WorkflowNotFound, 429 WorkflowRequestsThrottled (public code and
//     notes of projects that post to Workflows, 2025-2026).
package teams
