package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/store"
)

// DefaultCallbackMaxAge is how long a callback delivery is retried when
// Config.CallbackMaxAge is zero.
const DefaultCallbackMaxAge = 24 * time.Hour

// DefaultCallbacksPerClient is Config.CallbacksPerClient's default: with the
// worker's 20 callback workers, four clients' hanging receivers leave room
// for every other client's deliveries.
const DefaultCallbacksPerClient = 4

// QueueCallbacks is the queue of callback deliveries: a slow callback
// receiver never holds back the leads.
const QueueCallbacks = "callbacks"

// DeliverCallbackArgs are the arguments of the job that delivers one finish
// to its client's callback. The delivery itself (its body) is in the
// callbacks table, written by the finishing transaction.
type DeliverCallbackArgs struct {
	CallbackID uuid.UUID `json:"callback_id"`
}

// Kind is the job's kind in River.
func (DeliverCallbackArgs) Kind() string { return "deliver_callback" }

// InsertOpts puts the job on its own queue. Its attempts are bounded by
// the delivery's age (CALLBACK_MAX_AGE), not by a count.
func (DeliverCallbackArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueCallbacks, MaxAttempts: 10_000}
}

// DeliverCallbackWorker POSTs one finish to the client's callback, signed
// per Standard Webhooks with the secret in force when it is sent. Any 2xx is
// delivery; a 5xx, 408, 429, time-out or broken connection is retried with
// the retry policy's back-off (or the receiver's Retry-After) until the
// delivery is CALLBACK_MAX_AGE old; anything else gives it up.
//
// One client's receiver holds at most Config.CallbacksPerClient of this
// process's callback workers: a delivery to a client that has that many
// under way snoozes (no attempt spent, no worker held) and is tried again
// after a back-off that grows while the client stays busy, so a slow or
// hanging receiver never holds back another client's deliveries.
type DeliverCallbackWorker struct {
	river.WorkerDefaults[DeliverCallbackArgs]
	cfg     Config
	retryAt retryTimes

	mu       sync.Mutex
	inFlight map[string]int
}

// Snoozes of a delivery whose client has its bound of deliveries under
// way: the first about callbackBusyBase, doubling with each snooze of the
// job, at most callbackBusyMax; each drawn from the upper half, so that
// they spread.
const (
	callbackBusyBase = time.Second
	callbackBusyMax  = time.Minute
)

// take claims one of the client's places for a delivery; false when it
// has none free.
func (w *DeliverCallbackWorker) take(client string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[client] >= w.cfg.CallbacksPerClient {
		return false
	}
	w.inFlight[client]++
	return true
}

func (w *DeliverCallbackWorker) release(client string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[client]--; w.inFlight[client] <= 0 {
		delete(w.inFlight, client)
	}
}

// busySnooze is how long a delivery waits for a place of its client's,
// after it has waited snoozes times already.
func busySnooze(snoozes int64) time.Duration {
	d := callbackBusyMax
	if snoozes < 6 {
		d = min(callbackBusyMax, callbackBusyBase<<snoozes)
	}
	return d/2 + rand.N(d/2+1)
}

// NewDeliverCallbackWorker returns the worker.
func NewDeliverCallbackWorker(cfg Config) *DeliverCallbackWorker {
	return &DeliverCallbackWorker{cfg: cfg.withDefaults(), inFlight: map[string]int{}}
}

// NextRetry honours the receiver's Retry-After; otherwise the client's
// retry policy applies.
func (w *DeliverCallbackWorker) NextRetry(job *river.Job[DeliverCallbackArgs]) time.Time {
	return w.retryAt.take(job.ID)
}

// Work makes one delivery attempt.
func (w *DeliverCallbackWorker) Work(ctx context.Context, job *river.Job[DeliverCallbackArgs]) error {
	dctx, cancel := dbContext(ctx)
	cb, err := w.cfg.Store.LoadCallback(dctx, job.Args.CallbackID)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil || cb.Done {
		return err
	}
	ctx, span := leadSpan(ctx, cb.TraceParent, "deliver callback",
		attribute.String("callback_id", cb.ID.String()), attribute.String("client_id", cb.ClientID),
		attribute.String("job.id", strconv.FormatInt(job.ID, 10)), attribute.Int("job.attempt", job.Attempt))
	defer span.End()
	if !w.take(cb.ClientID) {
		return river.JobSnooze(busySnooze(snoozesOf(job.Metadata)))
	}
	defer w.release(cb.ClientID)
	attrs := []any{slog.String("callback_id", cb.ID.String()), slog.String("client_id", cb.ClientID), slog.Int("attempt", job.Attempt)}
	end := func(delivered bool) error {
		dctx, cancel := dbContext(ctx)
		defer cancel()
		return w.cfg.Store.CallbackAttempted(dctx, cb.ID, delivered, !delivered)
	}

	// The callback in force now: its URL, and the secret it is signed with.
	c, ok := w.cfg.Callers.Set().Client(cb.ClientID)
	if !ok || c.Callback == nil {
		w.cfg.Metrics.callbackDelivery("given_up", 0)
		w.cfg.Logger.WarnContext(ctx, "callback given up: the client has no callback any more", attrs...)
		return end(false)
	}
	err = hideURL(w.cfg.Callbacks.Deliver(ctx, c.Callback.URL, c.Callback.Secret, WebhookID(cb.ID), cb.Payload), c.Callback.URL)
	age := time.Since(cb.CreatedAt)
	// Of the URL, the log names the origin only (the path often holds the
	// receiver's secret).
	attrs = append(attrs, slog.String("callback", downstream.Origin(c.Callback.URL)))
	if err == nil {
		w.cfg.Metrics.callbackDelivery("delivered", age)
		return end(true)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return err // the worker is stopping: River makes the job available again
	}
	if retryable(err) && age < w.cfg.CallbackMaxAge {
		if de, ok := destination.AsError(err); ok && de.RetryAfter > 0 {
			w.retryAt.set(job.ID, time.Now().Add(de.RetryAfter))
		}
		dctx, cancel := dbContext(ctx)
		defer cancel()
		if serr := w.cfg.Store.CallbackAttempted(dctx, cb.ID, false, false); serr != nil {
			return serr
		}
		w.cfg.Metrics.callbackDelivery("retried", 0)
		w.cfg.Logger.InfoContext(ctx, "callback attempt failed; will retry", append(attrs, slog.String("error", err.Error()))...)
		return err
	}
	w.cfg.Metrics.callbackDelivery("given_up", 0)
	w.cfg.Logger.WarnContext(ctx, "callback given up", append(attrs, slog.String("error", err.Error()), slog.Duration("age", age))...)
	return end(false)
}

// hideURL returns err with its text cleared of what it may quote of the
// callback's URL beyond its scheme and host: its path (Zapier, n8n, Slack
// and Teams put their secret there), query and user-info. The error is
// logged, and River keeps its text in the job's row, which River UI shows.
// downstream's errors quote no more than the origin; this holds for any
// error a transport makes. The result unwraps to err.
func hideURL(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	u, perr := url.Parse(rawURL)
	if perr != nil {
		return err
	}
	var parts []string
	if len(u.Path) > 1 {
		parts = append(parts, u.EscapedPath(), u.Path)
	}
	if u.RawQuery != "" {
		parts = append(parts, u.RawQuery)
	}
	if u.User != nil {
		parts = append(parts, u.User.String())
		if pw, ok := u.User.Password(); ok && pw != "" {
			parts = append(parts, pw)
		}
	}
	msg := err.Error()
	hidden := msg
	for _, p := range parts {
		hidden = strings.ReplaceAll(hidden, p, "...")
	}
	if hidden == msg {
		return err
	}
	return &hiddenURLError{msg: hidden, err: err}
}

// hiddenURLError is an error whose text hideURL cleared.
type hiddenURLError struct {
	msg string
	err error
}

func (e *hiddenURLError) Error() string { return e.msg }
func (e *hiddenURLError) Unwrap() error { return e.err }

// retryable reports whether a delivery's failure is worth another attempt:
// a 5xx, 408, 429, a time-out or a broken connection (or a failure of our
// own, such as a cancelled context).
func retryable(err error) bool { return destination.Classify(err) == destination.Transient }

// snoozesOf reads the count of snoozes River keeps in a job's metadata.
func snoozesOf(metadata []byte) int64 {
	var m struct {
		Snoozes int64 `json:"snoozes"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Snoozes
}

// WebhookID is the webhook-id of every delivery attempt of one finish.
func WebhookID(id uuid.UUID) string {
	return "msg_" + strings.ReplaceAll(id.String(), "-", "")
}
