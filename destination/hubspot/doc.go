// Package hubspot is the destination kind hubspot: a HubSpot contact,
// upserted by email, on HubSpot's date-versioned CRM API (APIVersion).
//
// A lead is written as the contact that is its person:
//
//	POST /crm/objects/{APIVersion}/contacts/batch/upsert
//	{"inputs": [{"idProperty": "email", "id": <email, lower-cased>,
//	             "objectWriteTraceId": <external_ref>, "properties": {…}}]}
//
// with one input, so that a repeat (a retry, a lost answer, a redrive)
// updates the contact it made instead of making another, and crm_id is the
// contact's id (results[0].id). The contact is the person, not the
// enquiry: a second lead from the same email updates the same contact. The
// properties are the standard email, firstname, lastname, company, phone,
// website and message (a member without a value is left out, so that it
// never clears what the contact has), hubspot_owner_id for an owner with a
// crm_owner, and the destination's map.
//
// An amendment whose chain's contact is known is written over it by id
// (PATCH /crm/objects/{APIVersion}/contacts/{id}), so that an amendment that
// changes the email updates the chain's contact instead of upserting
// another; a look-up reads the contact by email (GET
// /crm/objects/{APIVersion}/contacts/{email}?idProperty=email), never the
// search endpoint, whose index lags behind writes. Check reads one contact
// (GET /crm/objects/{APIVersion}/contacts?limit=1).
//
// Each answer is classified here (see classify): HubSpot's category and
// error code, never its message, which quotes the lead's own values, reach
// the error. VALIDATION_ERROR (INVALID_EMAIL, PROPERTY_DOESNT_EXIST, and
// from 2026-09 on the portal's own rules, MISSING_REQUIRED_PROPERTY and
// MISSING_CONDITIONAL_REQUIRED_PROPERTY) rejects the lead; 401 and 403
// refuse the credentials; 429 and category RATE_LIMITS are transient, and
// hold every lead's calls for the interval HubSpot's rate-limit headers
// give (X-HubSpot-RateLimit-Remaining: 0 with
// X-HubSpot-RateLimit-Interval-Milliseconds), else for Retry-After, else
// for the policy the body names; 423 waits at least 2 s; 477 holds for its
// Retry-After; 5xx (521 included) are transient and may have been applied.
// A success whose X-HubSpot-RateLimit-Remaining is 0 is a success: the 429
// that may follow is what holds the destination.
//
// HubSpot's Go SDK is not used: it is an alpha that retries POSTs, 409s
// included, on its own.
//
// Pages relied on (read 2026-12):
//   - https://developers.hubspot.com/docs/api-reference/2026-03/crm/objects/contacts/batch/upsert-contacts
//   - https://developers.hubspot.com/docs/api-reference/2026-03/crm/objects/contacts/update-contact.md
//   - https://developers.hubspot.com/docs/api-reference/legacy/crm/objects/contacts/get-contact.md
//   - https://developers.hubspot.com/docs/api-reference/latest/overview
//   - https://developers.hubspot.com/docs/api-reference/legacy/migration-guide
//   - https://developers.hubspot.com/changelog/crm-api-write-validation-enforcement
//   - https://developers.hubspot.com/docs/api-reference/error-handling
//   - https://developers.hubspot.com/changelog/2018-11-06-rate-limit-information-headers-will-be-included-in-http-responses
//   - https://developers.hubspot.com/docs/apps/developer-platform/build-apps/authentication/account-service-keys
//   - https://developers.hubspot.com/docs/methods/contacts/create_or_update (409 for an email another contact has)
//   - https://github.com/HubSpot/hubspot-api-nodejs/issues/548 (upsert by a non-unique property: 400)
//   - https://github.com/segmentio/action-destinations/pull/3969 (two inputs for one record: the batch refused)
//   - https://github.com/airbytehq/airbyte/pull/76340 (contacts batch upsert answering 409)
package hubspot
