package intake

import "sync"

// peekPolicy decides whether a bearer token's submission reads its key
// before it claims it (Store.Peek). The read answers a retry without a
// transaction and without decoding its body again, and costs a new key a
// statement for nothing: it pays only while retries are common. The policy
// keeps a running share of the submissions whose key existed (the read
// found it, or the claim did), over about the last peekWindow of them,
// and reads first while that share is at least peekWhenShare. A retry that
// is not read first is answered by the claim, as exactly (the claim finds
// the key and answers from it, under its lock).
//
// A page's submission is always read first: only a new key of a page is
// rate-limited and judged, and a page learns nothing of a key that is not
// a page's.
type peekPolicy struct {
	mu sync.Mutex
	// share is the running share of submissions whose key existed; it
	// starts at 1 (reading first, the cheaper way for a retry).
	share   float64
	started bool
}

const (
	peekWindow    = 256
	peekWhenShare = 0.2
)

// wanted reports whether the next bearer-token submission reads its key
// first.
func (p *peekPolicy) wanted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.started || p.share >= peekWhenShare
}

// observe counts one bearer-token submission, whose key existed or not.
func (p *peekPolicy) observe(existed bool) {
	v := 0.0
	if existed {
		v = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.share, p.started = 1, true
	}
	p.share += (v - p.share) / peekWindow
}
