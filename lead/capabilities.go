package lead

// CRMCapabilities are what a CRM destination's kind guarantees of its
// writes. The lead's life (Next) asks them; it never asks which vendor it
// writes to.
type CRMCapabilities struct {
	// Upsert: the write is keyed (by the reference, or by a unique value
	// of the lead such as the email), so that a repeat after a lost answer
	// updates the record it made instead of making another. Without it,
	// the write creates, and after an outcome that may have been applied
	// the reference is looked up before any write again.
	Upsert bool
	// ConsistentLookup: a look-up's "not found" is definite (a read that
	// no index lags behind), so a create may follow it. Without it, a
	// record not found after a write that may have been applied is asked
	// about again later, and the key goes to reconciliation rather than
	// risk a second record.
	ConsistentLookup bool
	// UpdateByID: a record known by its id can be written over: the one an
	// amendment's chain already has, or one a look-up found under the
	// reference before this lead wrote anything. Without it, an amendment
	// is written like any lead (an upsert), or, for a create, a record a
	// look-up finds is left as it is (the warning crm_not_updated).
	UpdateByID bool
	// Prepares: the kind has a step before its writes and look-ups whose
	// result they need (Pipedrive's person, found by email or created),
	// kept with the lead as a recovery point (State.CRMPrepared), so that
	// a repeat finds what the first attempt made instead of making it
	// again, and its look-ups are made where the record is.
	Prepares bool
}

// Mode is how a CRM's writes are described to people: upsert or create.
func (c CRMCapabilities) Mode() Mode {
	if c.Upsert {
		return ModeUpsert
	}
	return ModeCreate
}

// ChannelCapabilities are what a notification channel's kind guarantees
// of its messages.
type ChannelCapabilities struct {
	// Find: after an outcome that may have been applied (a time-out, a
	// broken connection, a 5xx), the channel can find the message it may
	// have sent before it sends again: exactly once. Without it, a send
	// after such an outcome may repeat the message (at least once), unless
	// the receiver recognises the repeat (Dedupes).
	Find bool
	// Update: an amendment updates the message its chain already has on
	// the channel instead of sending another.
	Update bool
	// Dedupes: every attempt sends the same message, which the receiver
	// can tell for a repeat (an Idempotency-Key, a Message-ID).
	Dedupes bool
}
