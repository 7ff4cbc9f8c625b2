package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The spam phase's callers: a web page's publishable keys of the bench
// client, from benchOrigin (stack.clientsYAML).
const (
	benchOrigin = "https://bench.example"
	pkPlain     = "pk_bench_plain_0123456789abcdef"
	pkJudged    = "pk_bench_judged_0123456789abcdef"
	pkCaptcha   = "pk_bench_captcha_0123456789abcdef"
)

// spamKind is one caller of the spam phase and what it sends.
type spamKind struct {
	Name string `json:"name"`
	// token is the bearer token or publishable key; page says whether it
	// is a page's (Origin, Form-Signals).
	token   string
	page    bool
	signals string
}

// spamKinds take turns, one request each: an unjudged bearer-token claim,
// a page's claim without a spam policy, judged (the signals alone), and
// judged with a captcha verified by the in-process stand-in. Every one of
// them is a person's: none is spam.
func spamKinds(token string) []spamKind {
	return []spamKind{
		{Name: "bearer token (never judged)", token: token},
		{Name: "publishable key, no spam policy", token: pkPlain, page: true, signals: "hp=?0, t=30"},
		{Name: "publishable key, judged", token: pkJudged, page: true, signals: "hp=?0, t=30"},
		{Name: "publishable key, judged with a captcha", token: pkCaptcha, page: true, signals: `hp=?0, t=30, captcha="bench-token-0123456789"`},
	}
}

// spamResult is the spam phase: new keys at a fixed rate, the kinds in
// turn, each POST timed to its 202.
type spamResult struct {
	Rate    float64        `json:"rate"`
	Seconds float64        `json:"seconds"`
	Kinds   []spamKindStat `json:"kinds"`
	Errors  int            `json:"errors"`
	// FirstError is the first unexpected answer, for the report.
	FirstError string `json:"first_error,omitempty"`
}

type spamKindStat struct {
	Name    string       `json:"name"`
	Latency latencyStats `json:"latency"`
}

// runSpamPhase sends new keys at rate for d (worker stopped, as in the
// claims phase), each kind in turn, and times each POST to its 202: what
// judging a page's claim adds to it.
func runSpamPhase(ctx context.Context, lg *loadGen, token, prefix string, rate float64, d time.Duration) *spamResult {
	kinds := spamKinds(token)
	var (
		mu  sync.Mutex
		lat = make([][]time.Duration, len(kinds))
		res = &spamResult{Rate: rate}
	)
	_, took := openLoop(ctx, rate, d, nil, func(ctx context.Context, i int) {
		k := kinds[i%len(kinds)]
		var h http.Header
		if k.page {
			h = http.Header{"Origin": {benchOrigin}, "Form-Signals": {k.signals}}
		}
		a, err := lg.postAs(ctx, fmt.Sprintf("%s-%d", prefix, i), readNothing, k.token, h)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || a.status != http.StatusAccepted || a.replayed != "false" {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("%s: %d %v", k.Name, a.status, err)
			}
			return
		}
		lat[i%len(kinds)] = append(lat[i%len(kinds)], a.latency)
	})
	res.Seconds = took.Seconds()
	for i, k := range kinds {
		res.Kinds = append(res.Kinds, spamKindStat{Name: k.Name, Latency: statsOf(lat[i])})
	}
	return res
}

func printSpam(r *spamResult) {
	if r == nil {
		return
	}
	fmt.Printf("  %-34s (%.0f new keys/s in turn for %.0f s, worker stopped; %d errors)\n", "judged claims (spam)", r.Rate, r.Seconds, r.Errors)
	for _, k := range r.Kinds {
		fmt.Printf("  %-40s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  (%d)\n", "  "+k.Name, k.Latency.P50Ms, k.Latency.P90Ms, k.Latency.P99Ms, k.Latency.N)
	}
	if r.FirstError != "" {
		fmt.Printf("  %-34s first error: %s\n", "", r.FirstError)
	}
}
