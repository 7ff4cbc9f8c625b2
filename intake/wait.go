package intake

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the waiting of Prefer: wait.
const (
	DefaultMaxWait = 30 * time.Second
	// DefaultMaxWaiters bounds the requests one process holds at once;
	// past it, a request is answered at once.
	DefaultMaxWaiters = 10000
	// waitPoll is how often a held request looks at its key while no
	// notification can arrive (the listening connection is down).
	waitPoll = time.Second
)

// Waiters holds requests that asked to wait (Prefer: wait) until their key
// finishes. Every finished key is announced once its finishing transaction
// has committed (store.Listen); Finished wakes the requests waiting for it. While the
// announcements cannot arrive, held requests look at their key every
// second instead. It is safe for concurrent use.
type Waiters struct {
	max int

	mu     sync.Mutex
	byLead map[uuid.UUID]map[chan struct{}]struct{}
	count  int

	listening atomic.Bool
	stopping  chan struct{}
	stopOnce  sync.Once
	gauge     prometheus.Gauge
}

// NewWaiters returns Waiters that hold at most max requests at once
// (DefaultMaxWaiters when max is zero or less).
func NewWaiters(max int) *Waiters {
	if max <= 0 {
		max = DefaultMaxWaiters
	}
	return &Waiters{max: max, byLead: map[uuid.UUID]map[chan struct{}]struct{}{}, stopping: make(chan struct{})}
}

// Register exports the number of held requests as
// leadintake_waiting_requests on reg.
func (w *Waiters) Register(reg prometheus.Registerer) {
	w.gauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leadintake_waiting_requests",
		Help: "Requests held by this api process until their key finishes (Prefer: wait).",
	})
	reg.MustRegister(w.gauge)
}

// Finished wakes the requests waiting for the key of lead.
func (w *Waiters) Finished(lead uuid.UUID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byLead[lead] {
		wake(ch)
	}
}

// Listening records whether announcements can arrive. When they can again,
// every held request looks at its key once: one may have finished while
// nothing was heard.
func (w *Waiters) Listening(up bool) {
	if up && !w.listening.Swap(true) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, chans := range w.byLead {
			for ch := range chans {
				wake(ch)
			}
		}
		return
	}
	if !up {
		w.listening.Store(false)
	}
}

// Stop ends every wait, now and to come: the process is stopping, and held
// requests are answered as their keys stand.
func (w *Waiters) Stop() { w.stopOnce.Do(func() { close(w.stopping) }) }

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Wait holds the caller until finished reports the key of lead finished,
// or d passes, ctx ends or the process stops. finished is asked first, and
// again at every announcement for the lead; a look that fails (the
// database is away) does not end the wait. held is false when the bound of
// held requests is reached: the caller answers at once.
func (w *Waiters) Wait(ctx context.Context, lead uuid.UUID, d time.Duration, finished func() bool) (done, held bool) {
	ch := make(chan struct{}, 1)
	if !w.add(lead, ch) {
		return finished(), false
	}
	defer w.remove(lead, ch)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		if finished() {
			return true, true
		}
		var poll <-chan time.Time
		if !w.listening.Load() {
			poll = time.After(waitPoll)
		}
		select {
		case <-ch:
		case <-poll:
		case <-timer.C:
			return false, true
		case <-ctx.Done():
			return false, true
		case <-w.stopping:
			return false, true
		}
	}
}

func (w *Waiters) add(lead uuid.UUID, ch chan struct{}) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count >= w.max {
		return false
	}
	select {
	case <-w.stopping:
		return false
	default:
	}
	set := w.byLead[lead]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.byLead[lead] = set
	}
	set[ch] = struct{}{}
	w.count++
	if w.gauge != nil {
		w.gauge.Inc()
	}
	return true
}

func (w *Waiters) remove(lead uuid.UUID, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byLead[lead], ch)
	if len(w.byLead[lead]) == 0 {
		delete(w.byLead, lead)
	}
	w.count--
	if w.gauge != nil {
		w.gauge.Dec()
	}
}

// preferWait reads RFC 7240's wait preference from the Prefer headers:
// whole seconds, ok false when there is none (a malformed one is ignored,
// as the RFC asks).
func preferWait(values []string) (int, bool) {
	for _, v := range values {
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";") // parameters of the preference
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`))
			if err != nil || n < 0 {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// applyWait is the middleware of the routes that honour Prefer: wait: it
// answers Preference-Applied with the wait it will use, min(N, maxWait), on
// every answer to a request that asked, and keeps it for the handler.
func applyWait(maxWait time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if n, ok := preferWait(c.Request().Header.Values("Prefer")); ok {
				used := min(time.Duration(n)*time.Second, maxWait)
				c.Response().Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(used/time.Second)))
				requestOf(c).wait = used
			}
			return next(c)
		}
	}
}

// waitOf is how long the request asked to wait; 0 for not at all.
func waitOf(c echo.Context) time.Duration {
	return requestOf(c).wait
}
