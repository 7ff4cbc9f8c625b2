package store

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leadintake/leadintake/internal/tracing"
)

// GroupOpts configure the groups of concurrent requests (Store.GroupClaims,
// Store.GroupRuns).
type GroupOpts struct {
	// MaxGroup bounds the requests of one group; default 64.
	MaxGroup int
	// MaxInFlight bounds the groups of a kind running at once, each on a
	// connection of its own; default 4.
	MaxInFlight int
	// Timeout bounds one group's statements; default 5 s.
	Timeout time.Duration
}

func (o GroupOpts) withDefaults() GroupOpts {
	o.MaxGroup = cmp.Or(o.MaxGroup, 64)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, 4)
	o.Timeout = cmp.Or(o.Timeout, 5*time.Second)
	return o
}

// startGroups starts bs with o, on a store on a pool: a group runs on a
// connection of its own.
func (s *Store) startGroups(o GroupOpts, bs ...interface{ start(GroupOpts) }) error {
	if s.pool == nil {
		return errors.New("store: groups need a store on a pool")
	}
	o = o.withDefaults()
	for _, b := range bs {
		b.start(o)
	}
	return nil
}

// batcher does concurrent requests of one kind in groups: one statement (or
// one transaction) does the work of a group, whatever its size, so that
// requests that arrive together do not take a connection and a round trip
// each.
//
// Without groups (before start) every request goes alone, by single. With
// them, a request waits for no one (see queue), and its group:
//
//   - leaves out the requests whose callers left before it started, and a
//     request whose twin (the same key, the same lead) is in it already:
//     the twin goes alone, after, and finds what the group did;
//   - runs on a context of its own, bounded by GroupOpts.Timeout: a caller
//     that leaves does not fail the others;
//   - is recorded, as name, in the trace of each of its requests;
//   - when it fails, sends its requests alone, so that one bad request
//     never fails another; a failed group of one is its request's failure
//     (alone, it would only run the same statement again), unless retryOne.
type batcher[Req, Res any] struct {
	name string
	// run does the work of a group, on the group's context, and answers
	// the requests it decided (answer(i, ...) for reqs[i]); those it
	// leaves unanswered go alone. An error fails the whole group: none of
	// its answers count.
	run func(ctx context.Context, reqs []Req, answer func(i int, res Res, err error)) error
	// single does one request alone, on its caller's context.
	single func(ctx context.Context, req Req) (Res, error)
	// twin, when set, is what two requests of one group must not share.
	twin func(Req) any
	// retryOne sends a failed group of one's request alone too: for a
	// request whose single way is not the group's statement (a claim's
	// reads the key first).
	retryOne bool

	timeout time.Duration
	// groups is nil until start.
	groups *queue[*member[Req, Res]]
}

// member is one request waiting for its group.
type member[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan struct{}
	// answered is set, before done is closed, when the group answered the
	// request with res and err; otherwise it goes alone.
	answered bool
	res      Res
	err      error
}

// start makes b do its requests in groups. It is called once, before b is
// used.
func (b *batcher[Req, Res]) start(o GroupOpts) {
	b.timeout = o.Timeout
	b.groups = &queue[*member[Req, Res]]{maxBatch: o.MaxGroup, maxInFlight: o.MaxInFlight, run: b.runGroup}
}

// grouping reports whether b does its requests in groups.
func (b *batcher[Req, Res]) grouping() bool { return b.groups != nil }

// do does req, in a group or alone, and returns its answer; ctx.Err()
// when its caller leaves first (the group may still do it: a retry, or the
// job's next run, finds what it did).
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	if b.groups == nil {
		return b.single(ctx, req)
	}
	m := &member[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	b.groups.add(m)
	select {
	case <-m.done:
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
	if m.answered {
		return m.res, m.err
	}
	return b.single(ctx, req)
}

// runGroup runs one group (see batcher).
func (b *batcher[Req, Res]) runGroup(group []*member[Req, Res]) {
	defer func() {
		for _, m := range group {
			close(m.done)
		}
	}()
	var (
		members []*member[Req, Res]
		seen    = map[any]bool{}
	)
	for _, m := range group {
		if m.ctx.Err() != nil {
			continue // its caller left
		}
		if b.twin != nil {
			t := b.twin(m.req)
			if seen[t] {
				continue // goes alone
			}
			seen[t] = true
		}
		members = append(members, m)
	}
	if len(members) == 0 {
		return
	}
	reqs := make([]Req, len(members))
	for i, m := range members {
		reqs[i] = m.req
	}
	type answer struct {
		i   int
		res Res
		err error
	}
	var answers []answer
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	start := time.Now()
	err := b.run(ctx, reqs, func(i int, res Res, err error) { answers = append(answers, answer{i, res, err}) })
	end := time.Now()
	for _, m := range members {
		tracing.Grouped(m.ctx, b.name, start, end, len(members), err)
	}
	switch {
	case err == nil:
		for _, a := range answers {
			m := members[a.i]
			m.answered, m.res, m.err = true, a.res, a.err
		}
	case len(members) == 1 && !b.retryOne:
		members[0].answered, members[0].err = true, err
	}
}

// queue runs the items handed to it in batches. An item waits for no one:
// a batch starts as soon as one of maxInFlight slots is free, with the
// items that arrived meanwhile (at most maxBatch). Alone, an item is a
// batch of one at once; under load, batches grow by themselves.
type queue[T any] struct {
	maxBatch, maxInFlight int
	// run runs one batch; it must answer every item of it.
	run func([]T)

	mu       sync.Mutex
	items    []T
	inFlight int
}

// add hands item to the next batch.
func (q *queue[T]) add(item T) {
	q.mu.Lock()
	q.items = append(q.items, item)
	if q.inFlight < q.maxInFlight {
		q.inFlight++
		go q.loop()
	}
	q.mu.Unlock()
}

// loop runs batches until no item waits.
func (q *queue[T]) loop() {
	for {
		q.mu.Lock()
		n := min(len(q.items), q.maxBatch)
		if n == 0 {
			q.inFlight--
			q.mu.Unlock()
			return
		}
		batch := make([]T, n)
		copy(batch, q.items)
		q.items = append(q.items[:0], q.items[n:]...)
		q.mu.Unlock()
		q.run(batch)
	}
}
