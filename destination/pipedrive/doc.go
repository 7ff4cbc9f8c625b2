// Package pipedrive is the destination kind pipedrive: each lead becomes a
// Pipedrive lead (in the Leads Inbox), linked to the person who sent it.
//
// Pipedrive has no write keyed by a reference of ours: no external id, no
// upsert, no idempotency key. So the kind is a create kind whose look-up is
// consistent, and it prepares: before any look-up or write of a lead, the
// person is found by exact email (GET /api/v2/persons/search, fields=email,
// exact_match=true) or created (POST /api/v2/persons), and the person's id
// is kept with the lead as its recovery point (destination.Record.Prepared).
// The lead's look-up then lists that person's leads, the open ones and the
// archived ones (GET /v1/leads?person_id= and GET /v1/leads/archived?
// person_id=), and matches the text custom field ref_field against the
// reference: a list, not a search, so "not found" is definite. A lead not
// found is created (POST /v1/leads: title, person_id, ref_field, owner_id,
// the map's fields); one found, or the one an amendment's chain has, is
// updated (PATCH /v1/leads/{id}). crm_id is the lead's id, a UUID.
//
// What remains at risk is the person, never the lead: the person search is
// backed by an index that lags behind writes, so a person created by an
// attempt whose answer was lost may not be found by the next attempt, which
// then creates a second person (the lead itself is made once: the next
// attempt's look-up lists the leads of the person it prepared). Custom
// fields of leads are those of deals (leads inherit them), written as
// top-level members keyed by their 40-character hash, as for deals.
//
// Persons and search are on API v2 (their v1 endpoints are out of support
// since 2026-08-01); leads and the current user stay on v1, which has no v2
// equivalent for them; the check reads the deal field on v2. Every call
// carries the API token in the x-api-token header. The daily token budget
// is the company account's, shared with every other integration of it.
//
// Pages relied on:
//   - https://pipedrive.readme.io/docs/core-api-concepts-authentication
//     (the x-api-token header)
//   - https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting (the
//     token budget, the 2-second burst window, x-ratelimit-limit,
//     x-ratelimit-remaining, x-ratelimit-reset, 429)
//   - https://pipedrive.readme.io/docs/core-api-concepts-http-status-codes
//     (401 invalid token, 402 company account not open, 403 not allowed,
//     404, 410, 429, 5xx)
//   - https://pipedrive.readme.io/docs/core-api-concepts-custom-fields
//     (40-character keys; leads inherit the deals' custom fields)
//   - https://developers.pipedrive.com/changelog/post/introducing-leads-api
//     (title and a person or an organization; application/json bodies)
//   - https://developers.pipedrive.com/changelog/post/breaking-change-archived-deals-and-leads-will-not-be-returned-in-existing-endpoints-and-will-not-be-editable
//     (GET /v1/leads leaves archived leads out; /v1/leads/archived lists
//     them; archived leads cannot be edited through the API)
//   - https://developers.pipedrive.com/changelog/post/deprecated-apiv1-endpoints-become-out-of-support
//     (v1 persons and search out of support since 2026-08-01)
//   - https://pipedrive.readme.io/docs/pipedrive-api-v2 (persons, search and
//     fields on v2)
//   - github.com/pipedrive/client-nodejs, src/versions/v1/api/leads-api.ts,
//     models/add-lead-request.ts, update-lead-request.ts, lead.ts;
//     src/versions/v2/api/persons-api.ts, models/add-person-request.ts,
//     get-person-search-response-all-of-data-items-inner-item.ts;
//     src/versions/v2/api/deal-fields-api.ts (the request and answer shapes)
package pipedrive
