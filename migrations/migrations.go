// Package migrations holds leadintake's SQL migrations, embedded in the
// binary; Migrate, which applies River's migrations and then ours; and
// Check, which tells whether a database holds them all.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var files embed.FS

// lockID is the advisory lock that serialises concurrent Migrate calls
// (rivermigrate takes no lock of its own).
const lockID int64 = 0x6c65_6164_696e_7400 // "leadint\0"

// FS returns the embedded migration files.
func FS() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic(err)
	}
	return sub
}

// ErrPending is returned by Check when the database lacks migrations this
// binary needs.
var ErrPending = errors.New("the database lacks migrations: run `api migrate`")

// Check returns nil when the database holds every migration this binary
// needs (River's and leadintake's), ErrPending when some are missing, and the
// database's error when it cannot tell. It writes nothing.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("check migrations: river: %w", err)
	}
	res, err := riverMigrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check migrations: river: %w", err)
	}
	if !res.OK {
		return ErrPending
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, FS())
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	current, target, err := provider.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	if current < target {
		return ErrPending
	}
	return nil
}

// Migrate applies every pending migration: River's own first, then
// leadintake's. It is safe to run again (nothing pending, nothing done) and
// safe to run from two processes at once (an advisory lock serialises them).
// logger may be nil.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done: the connection goes back to the pool.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID)
	}()

	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	if _, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, FS())
	if err != nil {
		return fmt.Errorf("migrate: leadintake: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: leadintake: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "applied migration", slog.Int64("version", r.Source.Version), slog.String("file", r.Source.Path))
	}
	return nil
}
