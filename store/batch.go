package store

import "sync"

// batcher runs the items handed to it in batches, for statements that do
// the work of many requests in one round trip. An item waits for no one: a
// batch starts as soon as one of maxInFlight slots is free, with the items
// that arrived meanwhile (at most maxBatch). Alone, an item is a batch of
// one at once; under load, batches grow by themselves.
type batcher[T any] struct {
	maxBatch, maxInFlight int
	// run runs one batch; it must answer every item of it.
	run func([]T)

	mu       sync.Mutex
	queue    []T
	inFlight int
}

// add hands item to the next batch.
func (b *batcher[T]) add(item T) {
	b.mu.Lock()
	b.queue = append(b.queue, item)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.loop()
	}
	b.mu.Unlock()
}

// loop runs batches until no item waits.
func (b *batcher[T]) loop() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch := make([]T, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.run(batch)
	}
}
