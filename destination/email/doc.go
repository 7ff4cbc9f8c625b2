// Package email is the destination kind email: a notification channel
// that sends each lead's message over SMTP (RFC 5321), in one transaction
// whose recipients are every address of to and the lead's owner, as
// text/plain in UTF-8 with the lead's email as Reply-To and a subject
// naming the tier and the company.
//
// Members: host, port (587), tls (starttls, the default: STARTTLS, RFC
// 3207, required; tls: implicit TLS, RFC 8314, port 465; none: no TLS, for
// a relay on a loopback address only), username and password (SMTP AUTH,
// RFC 4954: PLAIN, else LOGIN), from, to (1 to 20 addresses). The server's
// certificate is always verified against the system's roots.
//
// Every attempt is the same message: its Message-ID is derived from the
// reference alone (RFC 5322 3.6.4: <external_ref.notify@domain of from>,
// <external_ref.notify.N@...> for the amendment N, whose In-Reply-To and
// References name the first), so that receivers and mail clients can tell
// a repeat (Sieve's duplicate, RFC 7352). It is at least once: a
// connection dropped between the final dot and the 250 reply leaves a
// message sent that the sender does not know of (RFC 1047), and the next
// attempt sends it again under the same Message-ID.
//
// Replies are classified by code (see classify): 4xx and a broken
// connection or a time-out are transient (uncertain after the final dot),
// 5xx rejects the message for the lead, 530, 534, 535 and 538 (and any
// 5xx to AUTH) are refused credentials. Each session is one call in the
// delivery log, its outcome the reply code that ended it. The library
// (github.com/emersion/go-smtp, with go-message for the message and
// go-sasl for AUTH) resends nothing by itself.
//
// The pages relied on:
//   - https://www.rfc-editor.org/rfc/rfc5321 (SMTP: replies 4.2, the
//     DATA transaction 4.1.1.4, time-outs 4.5.3.2, retries 4.5.4.1)
//   - https://www.rfc-editor.org/rfc/rfc4954 (AUTH: 235, 454, 530, 534,
//     535, 538)
//   - https://www.rfc-editor.org/rfc/rfc3207 (STARTTLS) and
//     https://www.rfc-editor.org/rfc/rfc8314 (implicit TLS for submission)
//   - https://www.rfc-editor.org/rfc/rfc6409 (message submission, port 587)
//   - https://www.rfc-editor.org/rfc/rfc5322 (Message-ID, In-Reply-To,
//     References) and https://www.rfc-editor.org/rfc/rfc2047 (encoded
//     words in headers)
//   - https://www.rfc-editor.org/rfc/rfc3463 (enhanced status codes)
//   - https://www.rfc-editor.org/rfc/rfc3834 (Auto-Submitted)
//   - https://www.rfc-editor.org/rfc/rfc1047 (duplicate messages and the
//     lost 250)
//   - https://www.rfc-editor.org/rfc/rfc7352 (Sieve: detecting duplicate
//     deliveries)
//   - https://pkg.go.dev/github.com/emersion/go-smtp (Client, SMTPError,
//     DataCommand.CloseWithResponse, CommandTimeout, SubmissionTimeout)
//   - https://mailpit.axllent.org/docs/integration/chaos/ (the tests'
//     server: SMTP error codes on demand)
package email
