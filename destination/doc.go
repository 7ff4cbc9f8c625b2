// Package destination is the seam between a lead's life and the systems
// sales teams use: a destination is a named, configured downstream, one CRM
// or one notification channel, of a kind (http, hubspot, salesforce,
// pipedrive, slack, email, teams).
//
// A kind is a driver, as River's database drivers are: a thin interface
// (CRM, Channel) with declared capabilities (CRMCapabilities,
// ChannelCapabilities) that the lifecycle asks for instead of switching on a
// vendor, a Spec that says which members its configuration takes and
// builds it, and one conformance suite (package destinationtest) that every
// kind runs against its stand-in. Each kind turns its vendor's answers into
// the few errors the lifecycle knows (Error, by Class: transient,
// rejected, unauthorized, conflict), so that what a lead does after an
// answer never depends on which vendor gave it.
//
// What a kind sends comes from one Record: the lead, its score and tier,
// its enrichment, its owner, and the reference (external_ref) it is
// written under. Field mapping (Mapping) adds vendor fields from the lead's
// members. The HTTP plumbing every HTTP kind shares (a client per
// destination with kept-alive connections and a time-out, an answer read
// within bounds, the standard classification of a status, Retry-After,
// and a record of each call for the delivery log) is Call.
//
// Secrets (tokens, client secrets, passwords, and the URLs of Slack and
// Teams webhooks, which are credentials themselves) never reach an error,
// a log line or a span: errors name the operation and the status, and a
// URL only by its origin (Origin).
package destination
