package jobs_test

import (
	"encoding/json"
	"testing"
	"time"
)

// A possible duplicate (the same email and content as an earlier lead of
// the client, under another key, within DUPLICATE_WINDOW) goes to the CRM
// and to sales with duplicate_of, and completes with the warning
// possible_duplicate: it is flagged, never held back.
func TestPossibleDuplicateIsFlagged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.store.FlagDuplicates(time.Hour)
	first := b.submit(t, adaBody)
	b.waitFinished(t, first.Key)
	second := b.submit(t, adaBody)
	got := b.waitFinished(t, second.Key)
	rec := b.crmRecord(t, second.Ref)
	requireCompleted(t, got, completedBody(second.LeadID, rec.IDs[0], 85, "hot", true, "possible_duplicate"))
	if first, _ := b.key(t, first.Key); len(first.Body["warnings"].([]any)) != 0 {
		t.Errorf("the first lead has warnings %v", first.Body["warnings"])
	}
	var crm struct {
		DuplicateOf string `json:"duplicate_of"`
	}
	if err := json.Unmarshal(rec.LastBody, &crm); err != nil || crm.DuplicateOf != first.LeadID.String() {
		t.Errorf("the CRM write's duplicate_of %q (%v), want %s", crm.DuplicateOf, err, first.LeadID)
	}
	n, ok := b.fake.Notification(second.Ref + ":notify")
	var note struct {
		DuplicateOf string `json:"duplicate_of"`
	}
	if !ok || json.Unmarshal(n.FirstBody, &note) != nil || note.DuplicateOf != first.LeadID.String() {
		t.Errorf("the notification's duplicate_of %q, want %s", note.DuplicateOf, first.LeadID)
	}
	if firstRec := b.crmRecord(t, first.Ref); firstRec.LastBody != nil {
		var c struct {
			DuplicateOf *string `json:"duplicate_of"`
		}
		if json.Unmarshal(firstRec.LastBody, &c) == nil && c.DuplicateOf != nil {
			t.Errorf("the first lead's CRM write has duplicate_of %s", *c.DuplicateOf)
		}
	}
}
