package lead_test

import (
	"testing"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// TestKeyTransitions pins every transition of an idempotency key: which
// event each state allows, and the state it leaves behind.
func TestKeyTransitions(t *testing.T) {
	t.Parallel()
	var (
		none        = lead.Key{}
		processing  = lead.Key{State: lead.KeyProcessing}
		reconciling = lead.Key{State: lead.KeyNeedsReconciliation}
		completed   = lead.Key{State: lead.KeyCompleted}
		unavailable = lead.Key{State: lead.KeyFailed, Failure: response.CodeDownstreamUnavailable}
		rejected    = lead.Key{State: lead.KeyFailed, Failure: response.CodeCRMRejected}
		erasedKey   = lead.Key{State: lead.KeyFailed, Failure: response.CodeErased, Erased: true}
		quarantined = lead.Key{State: lead.KeyQuarantined}
	)
	edit := func(k lead.Key, f func(*lead.Key)) lead.Key { f(&k); return k }
	expired := func(k lead.Key) lead.Key { return edit(k, func(k *lead.Key) { k.Expired = true }) }
	superseded := func(k lead.Key) lead.Key { return edit(k, func(k *lead.Key) { k.Superseded = true }) }
	erased := func(k lead.Key) lead.Key { return edit(k, func(k *lead.Key) { k.Erased = true }) }

	const refused = lead.KeyState("(refused)")
	tests := []struct {
		name  string
		key   lead.Key
		event lead.KeyEvent
		final lead.KeyState // of KeyFinish
		want  lead.KeyState // refused when the key does not allow the event
	}{
		{"NewKeyIsClaimed", none, lead.KeyClaim, "", lead.KeyProcessing},
		{"ExistingKeyIsNotClaimed", processing, lead.KeyClaim, "", refused},
		{"ExpiredKeyIsNotClaimedButTakenOver", expired(completed), lead.KeyClaim, "", refused},

		{"ExpiredKeyIsTakenOver", expired(completed), lead.KeyTakeOver, "", lead.KeyProcessing},
		{"ExpiredFailedKeyIsTakenOver", expired(unavailable), lead.KeyTakeOver, "", lead.KeyProcessing},
		{"LiveKeyIsNotTakenOver", completed, lead.KeyTakeOver, "", refused},
		{"NoKeyIsNotTakenOver", none, lead.KeyTakeOver, "", refused},

		{"DownstreamUnavailableIsReopened", unavailable, lead.KeyReopen, "", lead.KeyProcessing},
		{"SupersededKeyIsNeverReopened", superseded(unavailable), lead.KeyReopen, "", refused},
		{"ErasedKeyIsNeverReopened", erased(unavailable), lead.KeyReopen, "", refused},
		{"ExpiredKeyIsNotReopened", expired(unavailable), lead.KeyReopen, "", refused},
		{"RefusalIsNotReopened", rejected, lead.KeyReopen, "", refused},
		{"ErasureIsNotReopened", erasedKey, lead.KeyReopen, "", refused},
		{"CompletedIsNotReopened", completed, lead.KeyReopen, "", refused},
		{"ProcessingIsNotReopened", processing, lead.KeyReopen, "", refused},

		{"ProcessingFinishesCompleted", processing, lead.KeyFinish, lead.KeyCompleted, lead.KeyCompleted},
		{"ProcessingFinishesFailed", processing, lead.KeyFinish, lead.KeyFailed, lead.KeyFailed},
		{"ReconcilingFinishes", reconciling, lead.KeyFinish, lead.KeyCompleted, lead.KeyCompleted},
		{"FinishedKeyFinishesOnce", completed, lead.KeyFinish, lead.KeyFailed, refused},
		{"FailedKeyFinishesOnce", unavailable, lead.KeyFinish, lead.KeyCompleted, refused},
		{"AFinishNeedsAFinalState", processing, lead.KeyFinish, lead.KeyProcessing, refused},

		{"ProcessingAwaitsReconciliation", processing, lead.KeyReconcile, "", lead.KeyNeedsReconciliation},
		{"FinishedKeyDoesNotAwaitReconciliation", completed, lead.KeyReconcile, "", refused},

		{"ReconcilingResumes", reconciling, lead.KeyResume, "", lead.KeyProcessing},
		{"ProcessingDoesNotResume", processing, lead.KeyResume, "", refused},
		{"FinishedKeyDoesNotResume", completed, lead.KeyResume, "", refused},

		{"AFinishIsNotAQuarantine", processing, lead.KeyFinish, lead.KeyQuarantined, refused},
		{"ProcessingIsQuarantinedByItsClaim", processing, lead.KeyQuarantine, "", lead.KeyQuarantined},
		{"AFinishedKeyIsNotQuarantined", completed, lead.KeyQuarantine, "", refused},
		{"QuarantinedIsNotReopened", quarantined, lead.KeyReopen, "", refused},
		{"QuarantinedIsReleased", quarantined, lead.KeyRelease, "", lead.KeyProcessing},
		{"SupersededQuarantinedIsNotReleased", superseded(quarantined), lead.KeyRelease, "", refused},
		{"ErasedQuarantinedIsNotReleased", erased(quarantined), lead.KeyRelease, "", refused},
		{"ExpiredQuarantinedIsNotReleased", expired(quarantined), lead.KeyRelease, "", refused},
		{"OnlyQuarantinedIsReleased", unavailable, lead.KeyRelease, "", refused},
		{"ErasureKeepsAQuarantine", quarantined, lead.KeyErase, "", lead.KeyQuarantined},
		{"ErasureFinishesProcessing", processing, lead.KeyErase, "", lead.KeyFailed},
		{"ErasureFinishesReconciling", reconciling, lead.KeyErase, "", lead.KeyFailed},
		{"ErasureKeepsAFinalResponse", completed, lead.KeyErase, "", lead.KeyCompleted},
		{"ErasureKeepsAFailure", unavailable, lead.KeyErase, "", lead.KeyFailed},
		{"ErasedLeadIsErasedOnce", erasedKey, lead.KeyErase, "", refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.key.After(tt.event, tt.final)
			if !ok {
				got = refused
			}
			if got != tt.want {
				t.Errorf("%+v after %s: %q, want %q", tt.key, tt.event, got, tt.want)
			}
			if ok != tt.key.Allows(tt.event) && tt.event != lead.KeyFinish {
				t.Errorf("After and Allows disagree on %s for %+v", tt.event, tt.key)
			}
		})
	}
}

// TestKeyRetry pins how a retry of the same request is answered.
func TestKeyRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  lead.Key
		want lead.RetryAnswer
	}{
		{"NoKeyIsClaimed", lead.Key{}, lead.RetryClaims},
		{"ExpiredKeyIsClaimed", lead.Key{State: lead.KeyCompleted, Expired: true}, lead.RetryClaims},
		{"ProcessingIsInProgress", lead.Key{State: lead.KeyProcessing}, lead.RetryInProgress},
		{"ReconcilingIsInProgress", lead.Key{State: lead.KeyNeedsReconciliation}, lead.RetryInProgress},
		{"CompletedIsReplayed", lead.Key{State: lead.KeyCompleted}, lead.RetryReplay},
		{"RefusalIsReplayed", lead.Key{State: lead.KeyFailed, Failure: response.CodeCRMRejected}, lead.RetryReplay},
		{"QuarantineIsReplayed", lead.Key{State: lead.KeyQuarantined}, lead.RetryReplay},
		{"DownstreamUnavailableReopens", lead.Key{State: lead.KeyFailed, Failure: response.CodeDownstreamUnavailable}, lead.RetryReopens},
		{"SupersededUnavailableIsReplayed", lead.Key{State: lead.KeyFailed, Failure: response.CodeDownstreamUnavailable, Superseded: true}, lead.RetryReplay},
		{"ErasedUnavailableIsReplayed", lead.Key{State: lead.KeyFailed, Failure: response.CodeDownstreamUnavailable, Erased: true}, lead.RetryReplay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.key.Retry(); got != tt.want {
				t.Errorf("retry of %+v: %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}
