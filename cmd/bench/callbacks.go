package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/jobs"
)

// benchCallbackClient is the client with a callback: the fake's receiver,
// which verifies every signature with benchCallbackSecret. Only the
// callbacks phase submits as this client, so no other phase pays for
// deliveries.
const (
	benchCallbackClient = "bench-callbacks"
	benchCallbackSecret = "whsec_YmVuY2gtY2FsbGJhY2stc2VjcmV0LTAxMjM0NTY3"
)

// callbackResult is the callbacks phase: new leads of a client with a
// callback at a fixed rate, each finish's delivery timed from its finishing
// transaction (callbacks.created_at, that transaction's now()) to the
// receiver's arrival of the attempt that delivered it.
type callbackResult struct {
	Rate    float64 `json:"rate"`
	Leads   int     `json:"leads"`
	Seconds float64 `json:"seconds"`
	// Errors: POSTs not answered 202 or 201.
	Errors int `json:"errors"`
	// Delivery: finish to delivery. The figure.
	Delivery latencyStats `json:"finish_to_delivery"`
	// Retried: deliveries that needed more than one attempt.
	Retried int `json:"retried"`
	// Unverified: deliveries whose signature the receiver refused.
	Unverified int `json:"unverified"`
	// Missing: leads sent without a delivery at the end of the phase.
	Missing int    `json:"missing"`
	CPU     cpuUse `json:"cpu_cores"`
}

// runCallbackPhase POSTs new keys named prefix-i as the callback client at
// rate for d, open loop, waits until every key is finished and every
// callback delivered (or a minute has passed), and times the deliveries.
func runCallbackPhase(ctx context.Context, s *stack, lg *loadGen, prefix string, rate float64, d time.Duration) (*callbackResult, error) {
	r := &callbackResult{Rate: rate}
	var errs atomic.Int64
	before := takeCPU(benchPIDs()...)
	n, elapsed := openLoop(ctx, rate, d, nil, func(ctx context.Context, i int) {
		a, err := lg.post(ctx, fmt.Sprintf("%s-%d", prefix, i), readNothing)
		if err != nil || (a.status != http.StatusAccepted && a.status != http.StatusCreated) {
			errs.Add(1)
		}
	})
	if _, err := s.waitFinished(ctx, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("callbacks: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var owed int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM callbacks WHERE delivered_at IS NULL AND given_up_at IS NULL`).Scan(&owed); err != nil {
			return nil, err
		}
		if owed == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := takeCPU(benchPIDs()...)
	r.Leads, r.Seconds, r.Errors = n, elapsed.Seconds(), int(errs.Load())
	r.CPU = cpuBetween(before, after, apiPID, workerPID)

	rows, err := s.pool.Query(ctx, `SELECT id, created_at FROM callbacks`)
	if err != nil {
		return nil, err
	}
	finished := map[string]time.Time{}
	for rows.Next() {
		var (
			id uuid.UUID
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		finished[jobs.WebhookID(id)] = at
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var lat []time.Duration
	for _, m := range s.fake.Callbacks() {
		at, ok := finished[m.ID]
		if !ok || len(m.Attempts) == 0 {
			continue
		}
		// The last attempt is the one that delivered it; every earlier
		// one failed.
		lat = append(lat, m.Attempts[len(m.Attempts)-1].ReceivedAt.Sub(at))
		if m.Deliveries > 1 {
			r.Retried++
		}
		if !m.Verified {
			r.Unverified++
		}
	}
	r.Missing = max(n-len(lat), 0)
	r.Delivery = statsOf(lat)
	return r, nil
}

func printCallbacks(r *callbackResult) {
	if r == nil {
		return
	}
	fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%d leads at %.0f/s: %d delivered, %d after a retry, %d unverified, %d missing, %d errors)\n",
		"callbacks, finish to delivery", r.Delivery.P50Ms, r.Delivery.P90Ms, r.Delivery.P99Ms, r.Delivery.MaxMs,
		r.Leads, r.Rate, r.Delivery.N, r.Retried, r.Unverified, r.Missing, r.Errors)
	fmt.Printf("  %-34s (cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n", "",
		r.CPU.Machine, r.CPU.API, r.CPU.Worker, r.CPU.Postgres, r.CPU.Bench, r.CPU.Other)
}
