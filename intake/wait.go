package intake

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
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
	// DefaultMaxWaitersPerClient bounds the requests of one client held at
	// once, so that one caller cannot take every place.
	DefaultMaxWaitersPerClient = 1000
	// MaxFallbackLooks bounds the looks at their keys that held requests
	// make at once without an announcement (while the listening
	// connection is down, and once when it is back): a reconnect does not
	// read every held key at the same instant.
	MaxFallbackLooks = 16
	// waitPoll is about how often a held request looks at its key while no
	// announcement can arrive (the listening connection is down); each
	// look is drawn from the half period either side of it, and the look
	// after a reconnect from within one period, so that held requests do
	// not look in step.
	waitPoll = time.Second
)

// Waiters holds requests that asked to wait (Prefer: wait) until their key
// finishes. Every finished key is announced once its finishing transaction
// has committed (store.Listen); Finished wakes the requests waiting for it.
// While the announcements cannot arrive, held requests look at their key
// about every second instead, and once more when they can again (a finish
// may have gone unheard); those looks are spread out in time and at most
// MaxFallbackLooks run at once. It is safe for concurrent use.
type Waiters struct {
	max, maxPerClient int
	// fallback bounds the looks made without an announcement.
	fallback chan struct{}

	mu       sync.Mutex
	byLead   map[uuid.UUID]map[chan struct{}]struct{}
	byClient map[string]int
	count    int
	// listening is whether announcements can arrive; changed is closed,
	// and replaced, whenever it changes.
	listening bool
	changed   chan struct{}

	stopping chan struct{}
	stopOnce sync.Once
	gauge    prometheus.Gauge
}

// NewWaiters returns Waiters that hold at most max requests at once
// (DefaultMaxWaiters when max is zero or less), and at most
// DefaultMaxWaitersPerClient (or max, when smaller) of one client.
func NewWaiters(max int) *Waiters {
	if max <= 0 {
		max = DefaultMaxWaiters
	}
	return &Waiters{
		max: max, maxPerClient: min(max, DefaultMaxWaitersPerClient),
		fallback: make(chan struct{}, MaxFallbackLooks),
		byLead:   map[uuid.UUID]map[chan struct{}]struct{}{}, byClient: map[string]int{},
		changed: make(chan struct{}), stopping: make(chan struct{}),
	}
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
// every held request looks at its key once, at a moment of its own within
// the next second: one may have finished while nothing was heard.
func (w *Waiters) Listening(up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.listening == up {
		return
	}
	w.listening = up
	close(w.changed)
	w.changed = make(chan struct{})
}

// listenState is whether announcements can arrive, and the channel closed
// when that changes.
func (w *Waiters) listenState() (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listening, w.changed
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

// Wait holds the caller, a request of client, until finished reports the
// key of lead finished, or d passes, ctx ends or the process stops.
// finished is asked first, and again at every announcement for the lead
// (and, without announcements, as Waiters says, and once more when d has
// passed); a look that fails (the database is away) does not end the wait. held is false when a bound of
// held requests (the process's, or the client's) is reached: the caller
// answers at once.
func (w *Waiters) Wait(ctx context.Context, client string, lead uuid.UUID, d time.Duration, finished func() bool) (done, held bool) {
	ch := make(chan struct{}, 1)
	if !w.add(client, lead, ch) {
		return finished(), false
	}
	defer w.remove(client, lead, ch)
	timer := time.NewTimer(d)
	defer timer.Stop()
	// Read before the first look: a connection lost after it is seen.
	up, changed := w.listenState()
	if finished() {
		return true, true
	}
	// missed: the listening connection was down since the last look; a
	// finish may have gone unheard.
	missed := !up
	check := time.NewTimer(0)
	check.Stop()
	defer check.Stop()
	armed := false
	for {
		if !armed && missed {
			if up {
				check.Reset(rand.N(waitPoll))
			} else {
				check.Reset(waitPoll/2 + rand.N(waitPoll))
			}
			armed = true
		}
		select {
		case <-ch:
			if finished() {
				return true, true
			}
		case <-check.C:
			armed = false
			missed = !up
			switch w.fallbackLook(ctx, timer.C, finished) {
			case lookFinished:
				return true, true
			case lookEnded:
				return false, true
			}
		case <-changed:
			up, changed = w.listenState()
			missed = true
			if armed {
				check.Stop()
				armed = false
			}
		case <-timer.C:
			if missed {
				// A finish may have gone unheard since the last look:
				// the answer is the key as it stands now.
				return w.fallbackLook(ctx, nil, finished) == lookFinished, true
			}
			return false, true
		case <-ctx.Done():
			return false, true
		case <-w.stopping:
			return false, true
		}
	}
}

// Results of a fall-back look.
const (
	lookUnfinished = iota
	lookFinished
	lookEnded // the wait ended before a place was free
)

// fallbackLook asks finished once one of MaxFallbackLooks places is free,
// unless the wait ends first (its time is up, ctx ends, the process stops).
func (w *Waiters) fallbackLook(ctx context.Context, timeUp <-chan time.Time, finished func() bool) int {
	select {
	case w.fallback <- struct{}{}:
	case <-timeUp:
		return lookEnded
	case <-ctx.Done():
		return lookEnded
	case <-w.stopping:
		return lookEnded
	}
	defer func() { <-w.fallback }()
	if finished() {
		return lookFinished
	}
	return lookUnfinished
}

func (w *Waiters) add(client string, lead uuid.UUID, ch chan struct{}) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count >= w.max || w.byClient[client] >= w.maxPerClient {
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
	w.byClient[client]++
	if w.gauge != nil {
		w.gauge.Inc()
	}
	return true
}

func (w *Waiters) remove(client string, lead uuid.UUID, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byLead[lead], ch)
	if len(w.byLead[lead]) == 0 {
		delete(w.byLead, lead)
	}
	w.count--
	if w.byClient[client]--; w.byClient[client] == 0 {
		delete(w.byClient, client)
	}
	if w.gauge != nil {
		w.gauge.Dec()
	}
}

// preferWait reads RFC 7240's wait preference from the Prefer headers:
// whole seconds, ok false when there is none (a malformed one, anything but
// digits, is ignored, as the RFC asks). A number too large for an int64 is
// math.MaxInt64: any N of digits is a wait, however long.
func preferWait(values []string) (int64, bool) {
	for _, v := range values {
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";") // parameters of the preference
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			if value == "" || strings.Trim(value, "0123456789") != "" {
				return 0, false
			}
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				n = math.MaxInt64 // only digits: too large
			}
			return n, true
		}
	}
	return 0, false
}

// waitFor is the wait of a preference of n seconds: min(n, maxWait),
// never overflowing.
func waitFor(n int64, maxWait time.Duration) time.Duration {
	if n >= int64(maxWait/time.Second) {
		return maxWait
	}
	return time.Duration(n) * time.Second
}

// applyWait is the middleware of the routes that honour Prefer: wait: it
// answers Preference-Applied with the wait it will use, min(N, maxWait), on
// every answer to a request that asked, and keeps it for the handler.
func applyWait(maxWait time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if n, ok := preferWait(c.Request().Header.Values("Prefer")); ok {
				used := waitFor(n, maxWait)
				c.Response().Header().Set("Preference-Applied", "wait="+strconv.FormatInt(int64(used/time.Second), 10))
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
