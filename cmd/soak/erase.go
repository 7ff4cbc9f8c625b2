package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// Erasures on request, while leads are in flight.
const (
	eraseEvery    = 3 * time.Second // on average
	shareEraseCLI = 0.3             // by `api erase`; else POST /admin/erasures
	eraseTries    = 30
)

// erase erases, every few seconds until ctx is done, the email of one
// submission that was accepted and has no final answer yet: through the
// api's admin listener, or with `api erase`. It never picks a submission
// along an amendment chain (whose leads may share the email).
func (l *load) erase(ctx context.Context, rng *rand.Rand) {
	for sleep(ctx, between(rng, eraseEvery/2, eraseEvery*3/2)) {
		sub := l.eraseCandidate(rng)
		if sub == nil {
			continue
		}
		via := "admin"
		if rng.Float64() < shareEraseCLI {
			via = "cli"
		}
		var err error
		for range eraseTries {
			if err = l.eraseOnce(sub, via); err == nil {
				break
			}
			sleep(context.Background(), time.Second)
		}
		if err != nil {
			l.p.violate(invErased, "%s: the erasure (%s) never succeeded: %v", sub.id(), via, err)
			continue
		}
		l.p.load.erasures.Add(1)
	}
}

// eraseCandidate picks an accepted submission without a final answer,
// outside any amendment chain, and marks it.
func (l *load) eraseCandidate(rng *rand.Rand) *submission {
	subs := l.submissions()
	// The recent ones are the likeliest to be in flight.
	if len(subs) > 40 {
		subs = subs[len(subs)-40:]
	}
	rng.Shuffle(len(subs), func(i, j int) { subs[i], subs[j] = subs[j], subs[i] })
	for _, sub := range subs {
		if sub.supersedes != "" || sub.finalSeen() {
			continue
		}
		// A mark once set stays: a submission chosen before comes by
		// again while it is recent (its key finished by the erasure,
		// its client never asked again: no final answer seen), and the
		// outages' check and amend read the mark.
		sub.mu.Lock()
		ok := sub.accepted && !sub.amended && !sub.erasing
		if ok {
			sub.erasing = true
		}
		sub.mu.Unlock()
		if ok {
			return sub
		}
	}
	return nil
}

// eraseOnce asks for the erasure of the submission's email once; on
// success it records when the erasure returned.
func (l *load) eraseOnce(sub *submission, via string) error {
	var erased struct {
		Erased *int `json:"erased"`
	}
	switch via {
	case "cli":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, l.s.bins.Path("api"), "erase", "--client", sub.client, "--email", sub.lead.email(), "--json")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, l.s.eraseEnv...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("api erase: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
		}
		if err := json.Unmarshal(stdout.Bytes(), &erased); err != nil || erased.Erased == nil {
			return fmt.Errorf("api erase printed %q", stdout.String())
		}
	default:
		body, _ := json.Marshal(map[string]string{"client_id": sub.client, "email": sub.lead.email()})
		req, err := http.NewRequest(http.MethodPost, l.s.adminURL+"/admin/erasures", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.SetBasicAuth(adminUser, adminPassword)
		req.Header.Set("Content-Type", "application/json")
		resp, err := l.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /admin/erasures: %d %s", resp.StatusCode, got)
		}
		if err := json.Unmarshal(got, &erased); err != nil || erased.Erased == nil {
			return fmt.Errorf("POST /admin/erasures answered %s", got)
		}
	}
	if *erased.Erased > 1 {
		l.p.violate(invErased, "%s: the erasure of its email (unique to it) erased %d leads", sub.id(), *erased.Erased)
	}
	now := time.Now()
	sub.mu.Lock()
	sub.erasedAt, sub.erasedVia = now, via
	sub.mu.Unlock()
	return nil
}
