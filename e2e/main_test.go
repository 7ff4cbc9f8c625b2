// Package e2e drives the real binaries, api and worker, as separate
// processes against a real PostgreSQL and the fake downstream server, killing
// and restarting them where the scenario needs it.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/system"
)

// bins are the binaries under test, built once for the package (with the
// race detector when the tests run with it).
var bins *system.Binaries

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leadintake-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins, err = system.Build(ctx, dir, &system.BuildOpts{Race: raceEnabled})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
