package main

import "fmt"

// n8n's figures for the same lead template (the same enrichment, scoring,
// CRM and notification steps) on this machine. They were measured
// separately, with n8n; this bench does not measure them, it only prints
// them beside its own.
const (
	n8nNewLeadsPerS = 15.8 // new leads processed per second, without its Wait nodes
	n8nReplaysPerS  = 18.7 // repeated submissions answered per second
	n8nPeakRSSMiB   = 1333 // peak RSS
)

// comparison is one of our figures beside n8n's.
type comparison struct {
	Name string  `json:"name"`
	N8n  float64 `json:"n8n"`
	Ours float64 `json:"ours"`
	// OursFrom says which of our figures stands beside n8n's.
	OursFrom string `json:"ours_from"`
	// Factor is ours ÷ n8n's for a throughput, n8n's ÷ ours for memory:
	// how many times better ours is (below 1: worse).
	Factor float64 `json:"factor"`
}

// compareN8n puts the run's figures beside n8n's, for those of our phases
// that ran.
func compareN8n(r *results) []comparison {
	var c []comparison
	switch {
	case r.Service.System != nil:
		c = append(c, comparison{Name: "new leads/s", N8n: n8nNewLeadsPerS, Ours: r.Service.System.CompletedPerS,
			OursFrom: "whole system: completed leads/s", Factor: r.Service.System.CompletedPerS / n8nNewLeadsPerS})
	case r.Service.Burst != nil:
		c = append(c, comparison{Name: "new leads/s", N8n: n8nNewLeadsPerS, Ours: r.Service.Burst.CompletedPerS,
			OursFrom: "burst: completed leads/s", Factor: r.Service.Burst.CompletedPerS / n8nNewLeadsPerS})
	}
	if rp := r.Service.Replays; rp != nil {
		c = append(c, comparison{Name: "replays/s", N8n: n8nReplaysPerS, Ours: rp.PerS,
			OursFrom: "replays of finished keys /s", Factor: rp.PerS / n8nReplaysPerS})
	}
	if rss := r.RSS.APIPeakMiB + r.RSS.WorkerPeakMiB; r.RSS.APIPeakMiB > 0 && r.RSS.WorkerPeakMiB > 0 {
		c = append(c, comparison{Name: "peak RSS (MiB)", N8n: n8nPeakRSSMiB, Ours: rss,
			OursFrom: "api + worker peak RSS", Factor: n8nPeakRSSMiB / rss})
	}
	return c
}

func printN8n(c []comparison) {
	if len(c) == 0 {
		return
	}
	fmt.Println("beside n8n (n8n's figures for the same template on this machine, measured separately with n8n, not by this bench):")
	for _, x := range c {
		fmt.Printf("  %-16s n8n %8.1f   leadintake %8.1f (%s)   ×%.1f\n", x.Name, x.N8n, x.Ours, x.OursFrom, x.Factor)
	}
}
