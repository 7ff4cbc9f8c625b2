package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/jobs"
)

// checked is one destination's check, as `worker destinations check
// --json` prints it.
type checked struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// notCheckable is the reason of a destination that cannot be checked
// without sending it something (a webhook URL, the http kind).
const notCheckable = "not checkable without sending"

// errChecksFailed ends `worker destinations check` with exit status 1,
// once its lines are printed.
var errChecksFailed = errors.New("a destination failed its check")

// checkDestinations checks the destinations named (all when none is), one
// call each that changes nothing, and prints NAME KIND ok or NAME KIND
// failed: REASON per destination (--json: a list), never a secret.
func checkDestinations(ctx context.Context, dests *jobs.Destinations, args []string, stdout io.Writer, timeout time.Duration) error {
	asJSON := false
	var names []string
	for _, a := range args {
		switch {
		case a == "--json" || a == "-json":
			asJSON = true
		case len(a) > 0 && a[0] == '-':
			return &service.UsageError{Msg: fmt.Sprintf("unknown flag %q", a), Usage: "worker destinations check [--json] [NAME...]"}
		default:
			names = append(names, a)
		}
	}
	configs := dests.Configs()
	if len(names) == 0 {
		for _, c := range configs {
			names = append(names, c.Name)
		}
	}
	var out []checked
	for _, name := range names {
		r := checked{Name: name, Kind: "-"}
		for _, c := range configs {
			if c.Name == name {
				r.Kind = c.Kind
			}
		}
		switch checker, ok := dests.Checker(name); {
		case r.Kind == "-":
			r.Reason = "no such destination"
		case !ok:
			r.OK, r.Reason = true, notCheckable
		default:
			cctx, cancel := context.WithTimeout(ctx, 2*timeout)
			err := checker.Check(cctx)
			cancel()
			r.OK = err == nil
			if err != nil {
				r.Reason = err.Error()
			}
		}
		out = append(out, r)
	}
	if asJSON {
		if out == nil {
			out = []checked{}
		}
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		for _, r := range out {
			switch {
			case r.OK && r.Reason != "":
				fmt.Fprintf(stdout, "%s %s ok (%s)\n", r.Name, r.Kind, r.Reason)
			case r.OK:
				fmt.Fprintf(stdout, "%s %s ok\n", r.Name, r.Kind)
			default:
				fmt.Fprintf(stdout, "%s %s failed: %s\n", r.Name, r.Kind, r.Reason)
			}
		}
	}
	for _, r := range out {
		if !r.OK {
			return errChecksFailed
		}
	}
	return nil
}
