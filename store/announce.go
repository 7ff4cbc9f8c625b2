package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// announce tells the api processes, on FinishedChannel, that the leads' keys
// finished: the requests waiting for it (Prefer: wait) answer at once. It
// is called once the finishing transaction committed, and does not wait.
//
// The announcement is not made inside the finishing transaction: a
// transaction that sends NOTIFY holds PostgreSQL's notification lock from
// its commit's start to its end, WAL flush included, so every finishing
// transaction of every worker would commit one after the other. Sent after
// the commit, from a transaction that writes nothing, the lock is held for
// an instant, and the finishes of a moment go out in one statement. A crash
// between the commit and the announcement costs a waiting request its
// wait (it answers 202 when its time is up, as for any finish it missed),
// never a wrong answer.
func (s *Store) announce(leads ...uuid.UUID) {
	for _, id := range leads {
		if s.announcer == nil {
			// A store on a transaction (tests): announced in it.
			_, _ = s.db.Exec(context.Background(), `SELECT pg_notify($1, $2)`, FinishedChannel, id.String())
			continue
		}
		s.announcer.add(id)
	}
}

// announceTimeout bounds one announcement statement.
const announceTimeout = 5 * time.Second

// announceGroup announces the finishes of a group of leads in one
// statement.
func (s *Store) announceGroup(leads []uuid.UUID) {
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	defer cancel()
	_, _ = s.pool.Exec(ctx, `SELECT pg_notify($1, id::text) FROM unnest($2::uuid[]) AS id`, FinishedChannel, leads)
}
