package service

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// hangups is what a process started by Main does with SIGHUP, whose default
// action would end it. SIGHUP means "read the clients file again": a
// process that has one to read does so (OnHangup); until it says so (while
// it starts: before it has read its configuration or connected), and in a
// process without one, SIGHUP is logged and ignored. A SIGHUP ignored while
// starting is acted on once the process's reload is in place, so that a
// clients file edited meanwhile is in force.
type hangups struct {
	mu      sync.Mutex
	logger  *slog.Logger
	state   hangupState
	reload  chan struct{} // the process's reload, while it runs
	pending bool          // a SIGHUP came while the process started
}

type hangupState int

const (
	hangupStarting hangupState = iota
	hangupRunning
	hangupStopping
)

type hangupsKey struct{}

// catchHangups catches SIGHUP for the rest of the process, logging to
// stderr (as JSON: LOG_FORMAT is not read yet) until the process has a
// logger, and returns ctx carrying what Start and OnHangup need. stop ends
// the catching (for tests: a process keeps catching to its end).
func catchHangups(ctx context.Context, stderr io.Writer) (_ context.Context, stop func()) {
	h := &hangups{logger: slog.New(slog.NewJSONHandler(stderr, nil))}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ch {
			h.deliver()
		}
	}()
	return context.WithValue(ctx, hangupsKey{}, h), func() {
		signal.Stop(ch)
		close(ch)
		<-done
	}
}

// hangupsOf returns the hangups of ctx, nil when the process does not catch
// SIGHUP (run called in-process by a test).
func hangupsOf(ctx context.Context) *hangups {
	h, _ := ctx.Value(hangupsKey{}).(*hangups)
	return h
}

func (h *hangups) deliver() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reload != nil {
		select {
		case h.reload <- struct{}{}:
		default: // one is waiting already: it reads the latest file
		}
		return
	}
	// A reload put in place later (a process that has just started)
	// reads the file once then.
	h.pending = true
	switch h.state {
	case hangupStarting:
		h.logger.Warn("SIGHUP ignored while starting")
	case hangupStopping:
		h.logger.Warn("SIGHUP ignored while stopping")
	default:
		h.logger.Warn("SIGHUP ignored: no clients file to read again")
	}
}

// started is the process's start: from now on its logger tells of SIGHUP.
func (h *hangups) started(logger *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logger, h.state = logger, hangupRunning
}

// handle makes reload the process's answer to SIGHUP, and returns whether a
// SIGHUP came while the process started.
func (h *hangups) handle(reload chan struct{}) (pending bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reload, pending, h.pending = reload, h.pending, false
	return pending
}

// stopping is the end of the process's work: SIGHUP is ignored again.
func (h *hangups) stopping() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reload, h.state = nil, hangupStopping
}
