package client

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, maxDelay := 100*time.Millisecond, time.Second
	for n, ceiling := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 60: time.Second,
	} {
		for range 200 {
			if d := backoff(base, maxDelay, n); d < ceiling/2 || d > ceiling {
				t.Fatalf("backoff after %d failures: %s, want within [%s, %s]", n, d, ceiling/2, ceiling)
			}
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for v, want := range map[string]time.Duration{
		"2": 2 * time.Second, " 0 ": 0, "86400": maxRetryAfter, date: 90 * time.Second,
	} {
		d, ok := retryAfter(http.Header{"Retry-After": {v}})
		if !ok || d > want || d < want-2*time.Second {
			t.Errorf("Retry-After %q: %s %v, want %s", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon", "1.5"} {
		if _, ok := retryAfter(http.Header{"Retry-After": {v}}); ok {
			t.Errorf("Retry-After %q was read", v)
		}
	}
}
