package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/migrations"
)

// Ready returns nil when the database answers and holds every migration
// this binary needs. Once the migrations were found, only the database's
// answer is checked again: migrations are never taken back.
func (s *Store) Ready(ctx context.Context) error {
	if s.pool == nil {
		return errors.New("ready: the store has no pool")
	}
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	if s.migrated.Load() {
		return nil
	}
	if err := migrations.Check(ctx, s.pool); err != nil {
		return err
	}
	s.migrated.Store(true)
	return nil
}

// IsUnavailable reports whether err means the database could not be used
// (not reached, not answering in time, refusing the connection, or lacking
// the migrations), as opposed to a fault of the query itself. Any error that
// is not a server error about the statement (syntax, constraint, data)
// counts as unavailability: connection refused, reset or closed, time-outs,
// a pool that could not connect, a refused role or password, a missing
// database, a server shutting down or refusing writes (read-only, during a
// failover), tables not migrated yet.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, migrations.ErrPending) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", // undefined table
			"42703", // undefined column
			"42883", // undefined function
			"3F000": // invalid schema name
			// The schema is older than this binary: not migrated yet.
			return true
		case "25006": // read_only_sql_transaction
			// The server takes no writes: a primary fenced for a
			// failover, or a standby a connection still reaches.
			return true
		}
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"28", // invalid authorization: a refused role or password
			"3D", // invalid catalog name: the database does not exist
			"40", // serialization failure, deadlock: try again
			"53", // insufficient resources
			"57", // operator intervention: shutdown, cancel, cannot connect now
			"58": // system error
			return true
		}
		return false
	}
	return true
}

// KeyCounts counts the keys by state, expired ones left out, and returns the
// age in seconds of the oldest processing key. Unfinished keys are counted on
// their partial index; finished ones by a scan of the table, which is why
// the metrics cache this.
func (s *Store) KeyCounts(ctx context.Context) (map[lead.KeyState]float64, float64, error) {
	rows, err := s.db.Query(ctx, `
SELECT state, count(*),
       coalesce(extract(epoch FROM now() - min(updated_at) FILTER (WHERE state = 'processing')), 0)::float8
FROM idempotency_keys
WHERE expires_at IS NULL OR expires_at > now()
GROUP BY state`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	counts := map[lead.KeyState]float64{}
	var oldest float64
	for rows.Next() {
		var (
			state lead.KeyState
			n     int64
			age   float64
		)
		if err := rows.Scan(&state, &n, &age); err != nil {
			return nil, 0, err
		}
		counts[state] = float64(n)
		oldest = max(oldest, age)
	}
	return counts, oldest, rows.Err()
}
