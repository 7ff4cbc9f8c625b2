// Package lead is the enquiry and its life, without a database or a network:
// the lead a caller submits (its fields, their rules, its canonical form and
// fingerprint, the keyed hashes kept of it), its score, the rules of its
// idempotency key (Key: what each state allows, how a retry is answered),
// and the state machine that takes it from the claim to its final response.
//
// A lead's life is one function, Next: from the state saved after the last
// step and the result of the last call, the next action and the state to
// save before running it. The worker (package jobs) is a loop that runs the
// action, saves the state, and asks again.
//
//	                  claim ──► key processing
//	                                 │
//	enrichment: pending ─► data | no_data | unavailable (after 3 failures, or a long Retry-After)
//	                                 │
//	CRM, upsert:   pending ──PUT──► accepted ─────────────────────┐
//	                  └──────4xx──► rejected ──► finish crm_rejected (422)
//	CRM, create:   pending ──(written ahead)──► uncertain ──POST──► accepted
//	                  ▲           uncertain ──look-up──► accepted (found)
//	                  │                           └────► uncertain, POST again (404)
//	                  └── certainly not applied (refused before sending)
//	                                                               │
//	notification: pending ─► sent | failed (after 3 failures)      │
//	                                 │◄────────────────────────────┘
//	                          finish completed (201)
//
//	a transient failure: retry (the downstream's Retry-After, or the policy);
//	on the last attempt: CRM uncertain ─► key needs_reconciliation
//	                      otherwise    ─► finish downstream_unavailable (502, re-opened by a retry)
//	a downstream down, holding every call or out of its rate limit: wait
//	(ActWait, no attempt spent) until it answers again; past
//	DELIVERY_MAX_AGE, as on the last attempt
//
//	needs_reconciliation ──look-up (reconciler) or operator──► Settle:
//	    found ─► CRM accepted, processing again (resumes at the notification)
//	    404   ─► CRM pending, processing again (posts again)
//
//	a job that ended without a final response ─► Abandoned: the end its
//	last attempt would have given the lead.
//
//	an amendment (Supersedes) shares the first lead's reference; before its
//	CRM step it waits (ActAwaitSuperseded: a snooze, no attempt spent) while
//	the key it supersedes is unfinished; in create mode its look-up finding
//	the record completes it with the warning crm_not_updated.
//
//	erasure (an operator, at any point): the personal data is gone; an
//	unfinished key ─► finish erased (422), never re-opened; the run stops
//	at its next save, before any further call. Retention erases the
//	personal data of a finished lead LEAD_RETENTION after it finished.
//
//	a web page's enquiry judged spam and quarantined: its key finishes at
//	its claim (quarantined, 200 received), without a job, until an operator
//	releases it; then it lives as a new claim's would.
package lead
