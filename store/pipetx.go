package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipelinedTx is a pgx.Tx over one connection whose BEGIN travels in one
// batch with the transaction's first statement, and whose COMMIT may travel
// with its last: pgx's own Begin and Commit are a round trip each. It
// behaves like pgx's transaction otherwise; a nested Begin (a savepoint) is
// refused, and River, the only other user of it, takes none.
type pipelinedTx struct {
	conn   *pgx.Conn
	closed bool
}

var _ pgx.Tx = (*pipelinedTx)(nil)

// beginWith sends BEGIN and stmt with args in one batch, and returns the
// transaction and the results of stmt, which the caller must read and
// close before anything else runs on the transaction. A durable
// transaction is on disk before its commit returns, whatever the session's
// synchronous_commit (the worker's is off: see Durable).
func beginWith(ctx context.Context, conn *pgx.Conn, durable bool, stmt string, args ...any) (*pipelinedTx, *beginResults) {
	b := &pgx.Batch{}
	b.Queue("begin")
	if durable {
		b.Queue("set local synchronous_commit to on")
	}
	b.Queue(stmt, args...)
	br := conn.SendBatch(ctx, b)
	return &pipelinedTx{conn: conn}, &beginResults{br: br, preamble: b.Len() - 1}
}

// beginResults are the results of a beginWith's batch: BEGIN's (and the
// preamble's) are read first, then the statement's rows.
type beginResults struct {
	br       pgx.BatchResults
	preamble int
}

// skipPreamble reads the results before the statement's.
func (r *beginResults) skipPreamble() error {
	for ; r.preamble > 0; r.preamble-- {
		if _, err := r.br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// Query returns the statement's rows.
func (r *beginResults) Query() (pgx.Rows, error) {
	if err := r.skipPreamble(); err != nil {
		return nil, err
	}
	return r.br.Query()
}

// QueryRow returns the statement's one row.
func (r *beginResults) QueryRow() pgx.Row {
	if err := r.skipPreamble(); err != nil {
		return errRow{err}
	}
	return r.br.QueryRow()
}

// Close closes the batch's results; it must be called before the
// transaction is used again.
func (r *beginResults) Close() error { return r.br.Close() }

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (t *pipelinedTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("store: nested transactions are not supported")
}

// Commit commits; like pgx, it reports pgx.ErrTxCommitRollback when the
// server rolled the transaction back instead (after an error in it).
func (t *pipelinedTx) Commit(ctx context.Context) error {
	return t.CommitWith(ctx, "")
}

// CommitWith runs stmt with args and commits, in one round trip; an empty
// stmt only commits. A failure of stmt rolls the transaction back and is
// returned.
func (t *pipelinedTx) CommitWith(ctx context.Context, stmt string, args ...any) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	b := &pgx.Batch{}
	if stmt != "" {
		b.Queue(stmt, args...)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	var stmtErr error
	if stmt != "" {
		_, stmtErr = br.Exec()
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case stmtErr != nil:
		// The batch's implicit error handling skipped the COMMIT, or it
		// answered ROLLBACK: either way the transaction did not commit.
		t.closeBroken(ctx)
		return stmtErr
	case err != nil:
		t.closeBroken(ctx)
		return err
	case tag.String() == "ROLLBACK":
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back; after Commit or Rollback it returns pgx.ErrTxClosed.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	_, err := t.conn.Exec(ctx, "rollback")
	if err != nil {
		t.closeBroken(ctx)
	}
	return err
}

// closeBroken closes a connection left inside a transaction, as pgx does:
// it must not serve anyone else.
func (t *pipelinedTx) closeBroken(ctx context.Context) {
	if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() != 'I' {
		_ = t.conn.Close(ctx)
	}
}

func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, columns, src)
}

func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// LargeObjects is not supported: its zero value fails on use.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *pipelinedTx) Conn() *pgx.Conn { return t.conn }

// exec runs one statement on its own; durable, it runs in a transaction
// that is on disk before its commit returns (one round trip either way).
func (s *Store) exec(ctx context.Context, durable bool, stmt string, args ...any) (pgconn.CommandTag, error) {
	if !durable || s.pool == nil {
		return s.db.Exec(ctx, stmt, args...)
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue("set local synchronous_commit to on")
	b.Queue(stmt, args...)
	b.Queue("commit")
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var tag pgconn.CommandTag
	for i := range 4 {
		t, err := br.Exec()
		if err != nil {
			return tag, err
		}
		if i == 2 {
			tag = t
		}
	}
	return tag, br.Close()
}
