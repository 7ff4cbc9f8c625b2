// Package jobs holds leadintake's River side: the jobs the store's
// transactions start (Queue, the store's Jobs) and the workers that run
// them.
//
//   - ProcessLead, a thin loop that runs the actions of a lead's life
//     (package lead) against the downstream services and saves each result
//     through the store. Each downstream is state shared by every worker
//     (Outages): a lead waits, spending no attempt, while its downstream is
//     down, holds calls or is out of its rate limit, and WakeWaiting wakes
//     it again.
//   - DeliverCallback, which delivers a finish to its client's callback.
//   - The periodic rounds: the reconciler, which settles keys whose CRM
//     outcome is uncertain; the orphan finisher, which ends keys whose job
//     ended without a final response; and the clean-up (expired keys, the
//     personal data of leads past their retention, callback deliveries
//     that ended long ago, hashes still kept plain).
//
// A lead's job continues the trace of the request that claimed or re-opened
// its key (Traced). It owns no table: every read and write goes through
// package store, and every question about a job goes to River's API.
package jobs
