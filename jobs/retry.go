package jobs

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// RetryPolicy is exponential back-off with jitter: attempt n waits about
// Base·2^(n-1), capped at Max, drawn uniformly from the upper half of that
// (so that retries of many jobs spread out but never come early).
type RetryPolicy struct {
	Base time.Duration
	Max  time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

// NextRetry implements river.ClientRetryPolicy.
func (p *RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	return now().Add(p.Delay(job.Attempt))
}

// Delay is the wait after failed attempt number attempt (from 1).
func (p *RetryPolicy) Delay(attempt int) time.Duration {
	d := p.Max
	if shift := max(attempt-1, 0); shift < 62 && p.Base <= p.Max>>shift {
		d = p.Base << shift
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
