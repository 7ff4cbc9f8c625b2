// Package webhook owns the Standard Webhooks signature scheme
// (https://www.standardwebhooks.com, "Signature scheme" and "Webhook
// headers"): the signing secrets, the signing of outbound callbacks and the
// verification of inbound webhooks.
//
// A secret is "whsec_" followed by the base64 of 24 to 64 random bytes;
// ParseSecret checks it once, where it is configured, and a Secret never
// prints its key. A message is signed over "id.timestamp.body" with
// HMAC-SHA256, and travels with three headers:
//
//	webhook-id:        the message's id, the same on every attempt
//	webhook-timestamp: the attempt's time, in Unix seconds
//	webhook-signature: v1,<base64 HMAC> (several, space-separated, while a secret rotates)
//
// Sign and SetHeaders make them; Verify checks them against one or more
// secrets (the new and the old one, during a rotation), refuses a timestamp
// too far from now (a replay), and returns the id, which the receiver uses
// as an idempotency key. Its errors tell a missing id (ErrMissingID), a bad
// or stale timestamp (ErrTimestamp) and a bad signature (ErrSignature)
// apart, and never quote a secret.
//
// The HMAC itself is computed by the specification's own Go library
// (github.com/standard-webhooks/standard-webhooks/libraries/go). Its
// Verify is not used: it reads the clock itself, has a fixed tolerance and
// one secret, and reports a missing id and a missing signature alike.
package webhook
