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
	"github.com/leadintake/leadintake/internal/testkit"
)

// bins are the binaries under test, built once for the package (with the
// race detector when the tests run with it).
var bins *system.Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leadintake-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	bins, err = system.Build(ctx, dir, &system.BuildOpts{Race: raceEnabled})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	testkit.AtExit(func() { os.RemoveAll(dir) })
	testkit.Main(m)
}
