package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ListenOpts configure Listen.
type ListenOpts struct {
	// Finished is called with the lead of every key that finishes.
	Finished func(leadID uuid.UUID)
	// Up is called with true once the connection listens, and with false
	// when it is lost: notifications sent meanwhile are lost with it.
	Up func(bool)
	// Retry is the wait before connecting again after a failure. Default
	// one second.
	Retry time.Duration
}

// Listen keeps one connection, made from cfg, listening on FinishedChannel
// until ctx ends, and reports every key that finishes. A connection that
// breaks (a database cut, a restart) is made again after opts.Retry, for as
// long as it takes.
func Listen(ctx context.Context, cfg *pgx.ConnConfig, opts ListenOpts) {
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	for ctx.Err() == nil {
		_ = listenOnce(ctx, cfg, &opts)
		select {
		case <-ctx.Done():
		case <-time.After(opts.Retry):
		}
	}
}

func listenOnce(ctx context.Context, cfg *pgx.ConnConfig, opts *ListenOpts) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+FinishedChannel); err != nil {
		return err
	}
	opts.Up(true)
	defer opts.Up(false)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if id, err := uuid.Parse(n.Payload); err == nil {
			opts.Finished(id)
		}
	}
}
