package main

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// acceptedSub adds to l a submission whose key was accepted (a 202) and
// has no final answer yet: a candidate for an erasure.
func acceptedSub(l *load, key string) *submission {
	sub := l.register("soak-b", key, newLead(rand.New(rand.NewPCG(1, 2)), int64(len(l.submissions())+1)))
	sub.record(answer{status: http.StatusAccepted, received: time.Now()}, false)
	return sub
}

// An erased submission stays marked however often later erasures look for
// a candidate among the same submissions: the checks that skip erased
// leads (the outages') read the mark after the load.
func TestEraseCandidateKeepsItsMark(t *testing.T) {
	l := newLoad(&phase{}, nil)
	first := acceptedSub(l, "soak-1-000001-aaaaaa")
	rng := rand.New(rand.NewPCG(3, 4))
	if got := l.eraseCandidate(rng); got != first {
		t.Fatalf("eraseCandidate = %v, want the only accepted submission", got)
	}
	// Its key finished as erased, and its client never asked again: no
	// final answer seen, and it is still among the recent ones.
	for i := range 20 {
		if got := l.eraseCandidate(rng); got != nil {
			t.Fatalf("search %d: eraseCandidate = %s, want none (the only submission is being erased)", i, got.id())
		}
		if !first.erasing {
			t.Fatalf("search %d cleared the erasure's mark of %s", i, first.id())
		}
	}

	second := acceptedSub(l, "soak-1-000002-bbbbbb")
	for i := range 20 {
		got := l.eraseCandidate(rng)
		switch {
		case i == 0 && got != second:
			t.Fatalf("eraseCandidate = %v, want the new submission %s", got, second.id())
		case i > 0 && got != nil:
			t.Fatalf("search %d: eraseCandidate = %s, want none", i, got.id())
		case !first.erasing || !second.erasing:
			t.Fatalf("search %d: marks %v, %v; want both erasing", i, first.erasing, second.erasing)
		}
	}
}

// An erased submission is never amended, whatever erasures looked at it
// since: an erasure touches no amendment chain.
func TestErasedSubmissionNeverAmended(t *testing.T) {
	// Were it amended, the amendment would find no api and give up at
	// once: the load ended long ago.
	l := newLoad(&phase{}, &stack{apiURL: "http://127.0.0.1:1"})
	ended := time.Now().Add(-time.Hour)
	l.endedAt.Store(&ended)
	sub := acceptedSub(l, "soak-1-000001-aaaaaa")
	rng := rand.New(rand.NewPCG(5, 6))
	if got := l.eraseCandidate(rng); got != sub {
		t.Fatalf("eraseCandidate = %v, want %s", got, sub.id())
	}
	l.eraseCandidate(rng) // a later erasure's search passes it over
	l.amend(sub, 1, rng)  // declines, and sends nothing
	if n := len(l.submissions()); n != 1 || sub.amended {
		t.Fatalf("%d submissions, amended %v: an erased submission was amended", n, sub.amended)
	}
}
