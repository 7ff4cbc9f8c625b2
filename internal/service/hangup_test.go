package service

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/leadintake/leadintake/internal/testkit"
)

// SIGHUP, sent to this very test process, never ends it: while it starts
// and without a reload it is logged and ignored; a reload put in place
// after one came while starting runs once at once, then once per SIGHUP;
// while stopping it is ignored again. (Signals are the process's: the test
// is not parallel. Were SIGHUP not caught, the test binary would die.)
func TestHangups(t *testing.T) {
	var stderr, stdout testkit.LockedBuffer
	ctx, stopCatching := catchHangups(t.Context(), &stderr)
	defer stopCatching()
	hup := func() {
		t.Helper()
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	count := func(b *testkit.LockedBuffer, msg string) int { return strings.Count(b.String(), `"msg":"`+msg+`"`) }

	hup()
	testkit.Eventually(t, "SIGHUP while starting logged on stderr", func() bool {
		return count(&stderr, "SIGHUP ignored while starting") == 1
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := Start(ctx, &Common{DatabaseURL: "postgres://nobody@127.0.0.1:1/none", LogFormat: "json", LogLevel: "info", ShutdownTimeout: 1}, &stdout, PoolOpts{})
	if err != nil {
		t.Fatal(err)
	}
	hup()
	testkit.Eventually(t, "SIGHUP without a reload logged by the process's logger", func() bool {
		return count(&stdout, "SIGHUP ignored: no clients file to read again") == 1
	})

	var reloads atomic.Int32
	p.OnHangup(func() { reloads.Add(1) })
	testkit.Eventually(t, "the reload run once for the SIGHUPs that came before it", func() bool { return reloads.Load() == 1 })
	hup()
	testkit.Eventually(t, "the reload run on SIGHUP", func() bool { return reloads.Load() == 2 })

	cancel()
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	hup()
	testkit.Eventually(t, "SIGHUP while stopping logged", func() bool {
		return count(&stdout, "SIGHUP ignored while stopping") == 1
	})
	if n := reloads.Load(); n != 2 {
		t.Fatalf("%d reloads, want 2", n)
	}
}
