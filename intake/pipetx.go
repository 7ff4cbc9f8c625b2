package intake

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipelinedTx is a pgx.Tx over a connection whose BEGIN was sent in one
// batch with the claim's first statement: one round trip where pgx's own
// Begin takes two. Everything else behaves like pgx's transaction; a nested
// Begin (a savepoint) is not supported, and River, the only other user,
// takes none.
type pipelinedTx struct {
	conn   *pgx.Conn
	closed bool
}

var _ pgx.Tx = (*pipelinedTx)(nil)

// beginWith sends BEGIN and stmt with args in one batch and returns the
// transaction and the results of stmt, which the caller must read, then
// close.
func beginWith(ctx context.Context, conn *pgx.Conn, stmt string, args ...any) (*pipelinedTx, pgx.BatchResults) {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(stmt, args...)
	return &pipelinedTx{conn: conn}, conn.SendBatch(ctx, b)
}

func (t *pipelinedTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("intake: nested transactions are not supported")
}

// Commit commits; like pgx, it reports pgx.ErrTxCommitRollback when the
// server rolled the transaction back instead (after an error in it).
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	tag, err := t.conn.Exec(ctx, "commit")
	t.closed = true
	if err != nil {
		t.closeBroken(ctx)
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back; after Commit or Rollback it returns pgx.ErrTxClosed.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	_, err := t.conn.Exec(ctx, "rollback")
	t.closed = true
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
