// Package salesforce is the destination kind salesforce: a CRM that writes
// each lead as a Salesforce Lead, upserted under the lead's reference
// (external_ref) in a custom Text field marked External ID and Unique
// (ref_field, LeadIntake_Ref__c by default):
//
//	PATCH /services/data/v68.0/sobjects/Lead/<ref_field>/<external_ref>
//
// No match creates the Lead (201), one match updates it (200; 204 before API
// version 46.0, answered by a read of its Id by the reference), several
// match (300) rejects the lead: a repeated write, after a lost answer, a
// crash, a redrive or for an amendment, updates the Lead the first one made
// and never makes a second, because the Unique index guards the reference.
// The kind is built for REST API v68.0 (Winter '27, on every org since that
// release, autumn 2026; see APIVersion).
//
// The kind authenticates with the OAuth 2.0 client credentials flow of an
// External Client App: POST <instance_url>/services/oauth2/token gives an
// access token that every lead of the process shares (one token fetch at a
// time, whatever the number of leads asking: tokens) until a 401 asks for
// a new one; then the call is made again, once. A token endpoint's refusal
// (invalid_client, invalid_grant, unsupported_grant_type) and a 401 after a
// fresh token are refused credentials (destination.Unauthorized): every lead
// bound for the destination waits for a corrected configuration.
//
// Salesforce sends no Retry-After. Its 403 REQUEST_LIMIT_EXCEEDED (the org's
// rolling 24-hour API allocation spent, or too many concurrent long
// requests) holds every lead's calls for LimitHold, as does any transient
// answer whose Sforce-Limit-Info header says the allocation is spent
// (api-usage=N/M with N >= M): a minute is long enough not to spend calls
// on an org that refuses them, and short enough to resume soon after the
// rolling window frees some.
//
// The pages this kind relies on:
//
//   - Upsert by external ID (201 created, 200 created:false since v46.0, 300
//     several matches, NOT_FOUND for a wrong field):
//     https://developer.salesforce.com/docs/platform/api-rest/guide/dome-upsert.html
//     and https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_upsert.htm
//   - sObject Rows by External ID (GET, PATCH):
//     https://developer.salesforce.com/docs/atlas.en-us.222.0.api_rest.meta/api/resources_sobject_upsert.htm
//   - Status codes and error responses ([{"message", "errorCode", "fields"}],
//     300, 401, 403):
//     https://developer.salesforce.com/docs/atlas.en-us.264.0.api_rest.meta/api_rest/errorcodes.htm
//   - Limit Info header (Sforce-Limit-Info: api-usage=N/M):
//     https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_api_usage.htm
//   - API request limits (REQUEST_LIMIT_EXCEEDED for concurrent long
//     requests and the 24-hour allocation):
//     https://developer.salesforce.com/docs/platform/salesforce-app-limits-cheatsheet/guide/salesforce-app-limits-platform-api.html
//   - Duplicate Rule Header (allowSave=true passes Alert rules, not Block
//     rules; API 52.0 and later):
//     https://developer.salesforce.com/docs/platform/api-rest/guide/headers-duplicaterules.html
//   - Assignment Rule Header (Sforce-Auto-Assign: the active assignment
//     rule runs on every create and update unless FALSE; sent when the lead
//     has its owner):
//     https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api/headers_autoassign.htm
//   - Client credentials flow for an External Client App (Run As user):
//     https://help.salesforce.com/apex/HTViewHelpDoc?id=xcloud.meta_configure_client_credentials_flow_for_external_client_apps.htm
//     and the token request and answer:
//     https://developer.salesforce.com/docs/atlas.en-us.262.0.chatterapi.meta/chatterapi/quickstart_connecting.htm
//   - New connected apps restricted since Spring '26:
//     https://help.salesforce.com/apex/HTViewHelpDoc?id=xcloud.remoteaccess_oauth_client_credentials_flow_ca.htm
//   - OAuth token errors (invalid_grant, error_description):
//     https://help.salesforce.com/apex/HTViewHelpDoc?id=xcloud.remoteaccess_oauth_flow_errors.htm
//   - API versions (v66.0 Spring '26, v67.0 Summer '26, v68.0 Winter '27):
//     https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/soql-sosl-pdf-archive.html
//   - 200 instead of 204 since v46.0 (the answer every client library had to
//     learn): https://github.com/wadewegner/Force.com-Toolkit-for-NET/issues/407
//
// The stand-in, package salesforcefake, speaks these shapes; the operators'
// page is docs/destinations/salesforce.md.
package salesforce
