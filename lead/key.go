package lead

import "github.com/leadintake/leadintake/response"

// KeyState is an idempotency key's state, as stored in
// idempotency_keys.state.
type KeyState string

// Key states.
const (
	KeyProcessing          KeyState = "processing"
	KeyNeedsReconciliation KeyState = "needs_reconciliation"
	KeyCompleted           KeyState = "completed"
	KeyFailed              KeyState = "failed"
	// KeyQuarantined: a web page's enquiry judged spam, stored and finished
	// at its claim (200 received) without a job, until an operator
	// releases it.
	KeyQuarantined KeyState = "quarantined"
)

// KeyStates lists every key state, unfinished first.
var KeyStates = []KeyState{KeyProcessing, KeyNeedsReconciliation, KeyCompleted, KeyFailed, KeyQuarantined}

// Finished reports whether the key holds a final response, which its
// retries replay.
func (s KeyState) Finished() bool { return s == KeyCompleted || s == KeyFailed || s == KeyQuarantined }

// Key is what decides the transitions of an idempotency key: its state and
// the facts about it that a transition depends on. The zero Key is a key
// that does not exist.
type Key struct {
	State KeyState
	// Failure is the error code of a failed key's response.
	Failure response.Code
	// Superseded: an amendment superseded the key; its enquiry goes on
	// under the amendment's key.
	Superseded bool
	// Erased: the personal data of the key's lead was erased.
	Erased bool
	// Expired: the key's retention passed; it is as good as gone.
	Expired bool
}

// Exists reports whether there is a key (expired or not).
func (k Key) Exists() bool { return k.State != "" }

// KeyEvent is something that may happen to a key.
type KeyEvent int

// Key events.
const (
	// KeyClaim: a request claims the key, which does not exist.
	KeyClaim KeyEvent = iota + 1
	// KeyTakeOver: a request claims a key whose retention passed; a new
	// lead takes it.
	KeyTakeOver
	// KeyReopen: a retry of the same request (or an operator's redrive)
	// gives the key's lead a new attempt, after it failed on transient
	// downstream failures.
	KeyReopen
	// KeyFinish: the key's lead ends with a final response.
	KeyFinish
	// KeyReconcile: the key's lead waits for reconciliation: a post to the
	// CRM may have been applied and nothing could settle it.
	KeyReconcile
	// KeyResume: reconciliation settled the lead; it is processed again.
	KeyResume
	// KeyErase: the key's lead's personal data is erased; an unfinished
	// key finishes as failed with the code erased.
	KeyErase
	// KeyQuarantine: the claim that made the key finishes it at once,
	// quarantined: a web page's enquiry judged spam.
	KeyQuarantine
	// KeyRelease: an operator releases a quarantined key: its lead runs as
	// a new claim's would have.
	KeyRelease
)

var keyEventNames = [...]string{"", "claim", "take_over", "reopen", "finish", "reconcile", "resume", "erase", "quarantine", "release"}

func (e KeyEvent) String() string {
	if int(e) < len(keyEventNames) {
		return keyEventNames[e]
	}
	return "unknown"
}

// Allows reports whether e may happen to k. It is the one statement of each
// rule: the store applies a transition only to a key still as it was when
// Allows decided (see store).
func (k Key) Allows(e KeyEvent) bool {
	unfinished := k.State == KeyProcessing || k.State == KeyNeedsReconciliation
	switch e {
	case KeyClaim:
		return !k.Exists()
	case KeyTakeOver:
		return k.Exists() && k.Expired
	case KeyReopen:
		// A failure that is not a verdict on the lead, on a key that still
		// carries its enquiry: a superseded key's amendment carries it on,
		// an erased lead has nothing left to send.
		return k.State == KeyFailed && k.Failure == response.CodeDownstreamUnavailable &&
			!k.Superseded && !k.Erased && !k.Expired
	case KeyFinish, KeyQuarantine:
		return unfinished && !k.Erased
	case KeyReconcile:
		return k.State == KeyProcessing && !k.Erased
	case KeyResume:
		return k.State == KeyNeedsReconciliation && !k.Erased
	case KeyRelease:
		// As a re-open: a key that still carries its enquiry.
		return k.State == KeyQuarantined && !k.Superseded && !k.Erased && !k.Expired
	case KeyErase:
		return k.Exists() && !k.Erased
	}
	return false
}

// After returns the state e leaves k in, when k allows it; final is the
// state of a finish (KeyCompleted or KeyFailed) and is used by KeyFinish
// only. ok is false when k does not allow e.
func (k Key) After(e KeyEvent, final KeyState) (state KeyState, ok bool) {
	if !k.Allows(e) {
		return k.State, false
	}
	switch e {
	case KeyClaim, KeyTakeOver, KeyReopen, KeyResume, KeyRelease:
		return KeyProcessing, true
	case KeyQuarantine:
		return KeyQuarantined, true
	case KeyFinish:
		if final != KeyCompleted && final != KeyFailed {
			return k.State, false
		}
		return final, true
	case KeyReconcile:
		return KeyNeedsReconciliation, true
	case KeyErase:
		if k.State.Finished() {
			return k.State, true // a final response stays, and is replayed
		}
		return KeyFailed, true
	}
	return k.State, false
}

// RetryAnswer is how a retry of the same request is answered, as the key
// stands.
type RetryAnswer int

// Answers to a retry.
const (
	// RetryInProgress: the key is unfinished; the caller polls.
	RetryInProgress RetryAnswer = iota + 1
	// RetryReplay: the key's final response is replayed.
	RetryReplay
	// RetryReopens: the retry re-opens the key (KeyReopen).
	RetryReopens
	// RetryClaims: the key is gone (or never was); the retry claims it.
	RetryClaims
)

// Retry is how a retry of the same request (the same fingerprint) is
// answered by k.
func (k Key) Retry() RetryAnswer {
	switch {
	case !k.Exists() || k.Expired:
		return RetryClaims
	case k.Allows(KeyReopen):
		return RetryReopens
	case k.State.Finished():
		return RetryReplay
	default:
		return RetryInProgress
	}
}
