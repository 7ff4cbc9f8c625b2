// Package fake stands in for the outside world the worker talks to: the
// enrichment service, the CRM, the notification service and a client's
// callback receiver, all served by one http.Handler, Server.
//
// Tests serve it in-process with httptest.NewServer; the fakedownstream
// command serves it for the local demo and the chaos soak. The worker is
// pointed at it with
//
//	ENRICHMENT_URL=http://ADDR/enrichment
//	CRM_URL=http://ADDR/crm
//	NOTIFY_URL=http://ADDR/notify
//
// and a client's callback.url at http://ADDR/callbacks/{client}.
//
// Behaving well is the easy part: the enrichment answers are derived from the
// email's domain (same domain, same answer; a domain ending in ".nodata" has
// none), the CRM upserts by external reference (PUT) or, deliberately not
// idempotent, creates a new record on every POST, the notification
// service delivers each Idempotency-Key once, and the callback receiver
// keeps every attempt of a callback under its webhook-id, checking its
// Standard Webhooks signature when given the secret (Options.CallbackSecret).
//
// The point of a fake, though, is to misbehave on demand. Each Target has a
// queue of scripted faults (Server.Script), consumed one per request, and a
// persistent random mix (Server.SetChaos) that applies once the queue is
// empty. A Fault answers with an error status (with Retry-After if asked),
// waits, hangs until the client gives up, or drops the connection before or
// after applying the request: the last one is the classic lost answer, where
// the CRM has the record and the caller does not know it.
//
// What arrived is observable for assertions (Server.State, Server.CRM,
// Server.Notification, Server.Callback): records and writes per external
// reference, so that a duplicate shows, deliveries per notification key,
// attempts per callback (each with its timestamp and whether it verified),
// and request counts per target. The same controls and observations are
// offered over HTTP under /_fake/ for the binary; see Server.ServeHTTP.
//
// The fake logs method, path template, status, fault, external reference
// and webhook-id, never a lead's personal data.
package fake
