// Package browsertest starts the headless Chromium of the browser tests
// (River UI, the snippet, the demo form): Debian's chromium, which
// scripts/chromium.sh installs and make test runs.
package browsertest

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path is Debian's Chromium.
const Path = "/usr/bin/chromium"

// Require skips the test when there is no browser, except under CI=true,
// where a browser test must not silently disappear: there it fails.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no browser in CI: %s is missing (scripts/chromium.sh installs Debian's chromium package): %v", Path, err)
		}
		t.Skipf("no browser: %s is missing (scripts/chromium.sh installs Debian's chromium package; make test runs it): %v", Path, err)
	}
}

// Start starts a Chromium of the test's own (after Require), with a window
// of width × height pixels and a profile in the test's temporary
// directory, and returns the context of its first tab, which ends with
// parent. stop ends the tab and the browser; the caller runs it once.
func Start(t testing.TB, parent context.Context, width, height int) (tab context.Context, stop func()) {
	t.Helper()
	Require(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(parent,
		chromedp.ExecPath(Path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// The machine's closed network refuses Google's hosts: no
		// background traffic for the browser to wait on.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	)
	tab, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	return tab, func() { cancel(); cancelAlloc() }
}
