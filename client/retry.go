package client

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfter reads a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110, section 10.2.3), at most maxRetryAfter. ok is false when there
// is none or it cannot be read.
func retryAfter(h http.Header) (d time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(0, time.Until(t)), maxRetryAfter), true
}

// backoff is the delay before the next attempt after n consecutive
// failures: a random time between half of and all of min(base·2ⁿ⁻¹, max),
// so that callers that failed together do not retry together.
func backoff(base, maxDelay time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return d/2 + jitter(d/2)
}

// jitter returns a random duration in [0, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}
