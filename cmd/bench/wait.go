package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// waitResult is the Prefer: wait phase: new leads at a fixed rate, each POST
// asking the api to hold it until the lead is finished, timed from sending
// to the end of the answer.
type waitResult struct {
	Rate    float64 `json:"rate"`
	Wait    int     `json:"prefer_wait_s"`
	Leads   int     `json:"leads"`
	Seconds float64 `json:"seconds"`
	// Final: answered 201 with the completed lead's final response, the
	// request held until the lead finished. The figure.
	Final latencyStats `json:"final_201"`
	// Expired: answered 202, the wait ran out before the lead finished.
	Expired int `json:"expired_202"`
	// Errors: any other answer, a 201 whose body is not a completed lead,
	// or an answer without Preference-Applied: wait=N.
	Errors     int          `json:"errors"`
	FirstError string       `json:"first_error,omitempty"`
	All        latencyStats `json:"all_answers"`
	CPU        cpuUse       `json:"cpu_cores"`
}

// runWaitPhase POSTs new keys named prefix-i with Prefer: wait=wait at rate
// for d, open loop, and waits until every key is finished.
func runWaitPhase(ctx context.Context, s *stack, lg *loadGen, prefix string, rate float64, wait int, d time.Duration) (*waitResult, error) {
	prefer := "wait=" + strconv.Itoa(wait)
	r := &waitResult{Rate: rate, Wait: wait}
	var (
		mu         sync.Mutex
		final, all []time.Duration
	)
	fail := func(format string, args ...any) {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = fmt.Sprintf(format, args...)
		}
	}
	before := takeCPU(benchPIDs()...)
	n, elapsed := openLoop(ctx, rate, d, nil, func(ctx context.Context, i int) {
		a, err := lg.postPrefer(ctx, fmt.Sprintf("%s-%d", prefix, i), readBody, prefer)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fail("%v", err)
			return
		}
		if a.applied != prefer {
			fail("status %d with Preference-Applied %q, want %q", a.status, a.applied, prefer)
			return
		}
		switch a.status {
		case 201:
			var b struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(a.body, &b) != nil || b.Status != "completed" || a.replayed != "false" {
				fail("201 with Idempotent-Replayed %q, body %.200q", a.replayed, a.body)
				return
			}
			final = append(final, a.latency)
		case 202:
			r.Expired++
		default:
			fail("status %d, body %.200q", a.status, a.body)
			return
		}
		all = append(all, a.latency)
	})
	after := takeCPU(benchPIDs()...)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.Leads, r.Seconds = n, elapsed.Seconds()
	r.Final, r.All = statsOf(final), statsOf(all)
	r.CPU = cpuBetween(before, after, apiPID, workerPID)
	if _, err := s.waitFinished(ctx, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("wait: %w", err)
	}
	return r, nil
}

func printWait(r *waitResult) {
	if r == nil {
		return
	}
	fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%d leads at %.0f/s: %d answered 201, %d 202 (wait expired), %d errors)\n",
		fmt.Sprintf("Prefer: wait=%d, POST to 201", r.Wait), r.Final.P50Ms, r.Final.P90Ms, r.Final.P99Ms, r.Final.MaxMs,
		r.Leads, r.Rate, r.Final.N, r.Expired, r.Errors)
	fmt.Printf("  %-34s (cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n", "",
		r.CPU.Machine, r.CPU.API, r.CPU.Worker, r.CPU.Postgres, r.CPU.Bench, r.CPU.Other)
	if r.FirstError != "" {
		fmt.Printf("  %-34s first error: %s\n", "", r.FirstError)
	}
}
