package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/pgserver"
)

// cluster is a PostgreSQL primary and its streaming standby, in a
// directory of their own, as a managed PostgreSQL runs them: the standby
// replicates synchronously (synchronous_standby_names names it: a commit
// returns once the standby has flushed it) or asynchronously (a commit
// returns once it is on the primary's disk).
type cluster struct {
	dir   *pgserver.Dir
	sync  bool
	ports [2]int // primary, standby
}

// The data directories.
var servers = [2]string{"primary", "standby"}

// newCluster prepares a cluster in a new directory; start starts it.
func newCluster(bin string, ports [2]int, sync bool) (*cluster, error) {
	for _, port := range ports {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return nil, fmt.Errorf("port %d is taken (pass -ports): %w", port, err)
		}
		ln.Close()
	}
	dir, err := pgserver.NewDir(bin)
	if err != nil {
		return nil, err
	}
	return &cluster{dir: dir, sync: sync, ports: ports}, nil
}

// start creates the primary, the database leadintake on it, and the
// standby from a base backup of it, and waits until the standby streams
// (as the synchronous standby, in that mode).
func (c *cluster) start(ctx context.Context) error {
	d := c.dir
	if err := d.Init(ctx, servers[0], c.ports[0], "wal_level = replica", "max_wal_senders = 4", "max_connections = 100"); err != nil {
		return err
	}
	if err := appendHBA(d, servers[0], "host replication all 127.0.0.1/32 trust"); err != nil {
		return err
	}
	if err := d.Start(ctx, servers[0]); err != nil {
		return err
	}
	if err := c.exec(ctx, 0, "CREATE DATABASE leadintake"); err != nil {
		return err
	}
	if err := d.Run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.ports[0]), "-U", "postgres",
		"-D", d.Data(servers[1]), "-R", "-X", "stream", "-c", "fast"); err != nil {
		return err
	}
	// Once promoted, the standby runs alone, as a managed service's new
	// primary does until it has a new standby: it waits for no other.
	if err := d.Configure(servers[1],
		fmt.Sprintf("port = %d", c.ports[1]),
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby'", c.ports[0]),
		"synchronous_standby_names = ''",
	); err != nil {
		return err
	}
	if err := d.Start(ctx, servers[1]); err != nil {
		return err
	}
	// Commits wait for the standby only once it streams: CREATE DATABASE
	// above would have waited for it forever.
	if c.sync {
		if err := c.exec(ctx, 0, "ALTER SYSTEM SET synchronous_standby_names = 'standby'", "SELECT pg_reload_conf()"); err != nil {
			return err
		}
	}
	return c.waitStreaming(ctx)
}

func appendHBA(d *pgserver.Dir, name, line string) error {
	return appendFile(d.Data(name)+"/pg_hba.conf", line+"\n")
}

// exec runs statements on server i's database postgres.
func (c *cluster) exec(ctx context.Context, i int, statements ...string) error {
	conn, err := pgx.Connect(ctx, pgserver.URL(c.ports[i], "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range statements {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// waitStreaming waits until the primary streams to the standby, as its
// synchronous standby in that mode.
func (c *cluster) waitStreaming(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pgserver.URL(c.ports[0], "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	want := "async"
	if c.sync {
		want = "sync"
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var state, syncState string
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'standby'`).Scan(&state, &syncState)
		if err == nil && state == "streaming" && syncState == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby does not stream as %s (state %q, sync_state %q, %v)", want, state, syncState, err)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// serviceURL is the DATABASE_URL the processes get: both hosts, the one
// that accepts writes chosen at each connection.
func (c *cluster) serviceURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/leadintake?sslmode=disable&target_session_attrs=read-write",
		c.ports[0], c.ports[1])
}

// fence makes the primary refuse writes (default_transaction_read_only, in
// every session from its next statement) and waits until the standby has
// replayed everything the primary wrote: a planned switchover's first step.
func (c *cluster) fence(ctx context.Context) error {
	if err := c.exec(ctx, 0, "ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, pgserver.URL(c.ports[0], "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(time.Minute)
	for {
		var caughtUp bool
		err := conn.QueryRow(ctx, `SELECT replay_lsn >= pg_current_wal_lsn() FROM pg_stat_replication WHERE application_name = 'standby'`).Scan(&caughtUp)
		if err == nil && caughtUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby did not catch up with the fenced primary (%v)", err)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// promote makes the standby a primary, and waits until it accepts writes.
func (c *cluster) promote(ctx context.Context) error {
	return c.dir.Run(ctx, "pg_ctl", "-D", c.dir.Data(servers[1]), "-w", "-t", "60", "promote")
}

// stopPrimary stops the old primary: "immediate" as in a crash (every
// connection cut, nothing more written), "fast" as in a clean shutdown.
func (c *cluster) stopPrimary(ctx context.Context, mode string) error {
	return c.dir.Stop(ctx, servers[0], mode)
}

// close stops whatever still runs and removes the directory.
func (c *cluster) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.dir.Remove(ctx)
}

// logTail returns the last lines of a server's log, for a failure's message.
func (c *cluster) logTail(i, n int) string { return c.dir.LogTail(servers[i], n) }

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
