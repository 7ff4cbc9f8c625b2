package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/faultproxy"
	"github.com/leadintake/leadintake/internal/testkit"
)

// patience bounds every wait for something that must happen. It is far
// longer than anything takes on a healthy machine: tests never wait for it
// unless they are failing.
const patience = 30 * time.Second

func TestMain(m *testing.M) { testkit.Main(m) }

// lingeringProxyGoroutines returns the stacks of the goroutines still
// running a Proxy method after a short grace: a goroutine that Close has
// waited for has signalled its end, but may take a moment more to exit.
func lingeringProxyGoroutines() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		found := proxyGoroutines()
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxyGoroutines returns the stacks of the goroutines running a Proxy
// method.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "faultproxy.(*Proxy)") {
			found = append(found, g)
		}
	}
	return found
}

type testBundle struct {
	proxy *faultproxy.Proxy
}

// setup starts an echo server and a proxy in front of it.
func setup(t *testing.T) *testBundle {
	t.Helper()
	p, err := faultproxy.New(startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return &testBundle{proxy: p}
}

// startEcho starts a TCP server that sends back what it receives and
// half-closes when its peer does; it stops when the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// requireEcho reads len(want) bytes and checks they are want.
func requireEcho(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read echo of %q: %v", want, err)
	}
	if string(got) != want {
		t.Fatalf("echo: got %q, want %q", got, want)
	}
}

// requireClosed checks that c is closed by the other side: a read ends with
// an error that is not a time-out, and without data.
func requireClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	n, err := c.Read(make([]byte, 64))
	var netErr net.Error
	switch {
	case n > 0:
		t.Fatalf("read %d bytes from a connection that should be closed", n)
	case err == nil:
		t.Fatal("read no error from a connection that should be closed")
	case errors.As(err, &netErr) && netErr.Timeout():
		t.Fatalf("connection still open after %s", patience)
	}
}

// requireSilent checks that nothing arrives on c for a moment. A slow
// machine can only make this check weaker, never make it fail wrongly.
func requireSilent(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Read(make([]byte, 64))
	var netErr net.Error
	if n > 0 || !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("read %d bytes, %v from a frozen connection; want a time-out", n, err)
	}
}

func TestProxy(t *testing.T) {
	t.Parallel()

	t.Run("ForwardsBothWays", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		c := dial(t, bundle.proxy.Addr())
		send(t, c, "ping")
		requireEcho(t, c, "ping")

		// A half-close travels through: the echo server sees the end of
		// its input and ends its output in turn.
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(patience))
		if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
			t.Fatalf("after half-close: read %q, %v; want EOF", rest, err)
		}
	})

	t.Run("ForwardsLargeTransfersAndManyConnections", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", bundle.proxy.Addr(), patience)
				if err != nil {
					t.Errorf("dial: %v", err)
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(patience))
				msg := bytes.Repeat([]byte{byte('a' + i)}, 256<<10)
				go func() {
					_, _ = c.Write(msg)
					_ = c.(*net.TCPConn).CloseWrite()
				}()
				got, err := io.ReadAll(c)
				if err != nil || !bytes.Equal(got, msg) {
					t.Errorf("connection %d: read %d bytes, %v; want the %d sent", i, len(got), err, len(msg))
				}
			})
		}
		wg.Wait()
	})

	t.Run("CutClosesOpenConnections", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		c1, c2 := dial(t, bundle.proxy.Addr()), dial(t, bundle.proxy.Addr())
		for _, c := range []net.Conn{c1, c2} {
			send(t, c, "hello")
			requireEcho(t, c, "hello")
		}
		bundle.proxy.Cut()
		requireClosed(t, c1)
		requireClosed(t, c2)
	})

	t.Run("CutRefusesNewConnections", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.proxy.Cut()
		c, err := net.DialTimeout("tcp", bundle.proxy.Addr(), patience)
		if err != nil {
			return // refused outright: as good as closed
		}
		defer c.Close()
		_, _ = c.Write([]byte("anyone?"))
		requireClosed(t, c)
	})

	t.Run("RestoreForwardsAfterCut", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		old := dial(t, bundle.proxy.Addr())
		send(t, old, "before")
		requireEcho(t, old, "before")
		bundle.proxy.Cut()
		requireClosed(t, old)

		bundle.proxy.Restore()
		c := dial(t, bundle.proxy.Addr())
		send(t, c, "after")
		requireEcho(t, c, "after")
	})

	t.Run("BlackholeFreezesOpenConnectionsUntilRestore", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		c := dial(t, bundle.proxy.Addr())
		send(t, c, "warm")
		requireEcho(t, c, "warm")

		bundle.proxy.Blackhole()
		send(t, c, "late")
		requireSilent(t, c)

		bundle.proxy.Restore()
		requireEcho(t, c, "late")
	})

	t.Run("BlackholeHoldsNewConnectionsUntilRestore", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.proxy.Blackhole()
		c := dial(t, bundle.proxy.Addr()) // accepted...
		send(t, c, "hello?")
		requireSilent(t, c) // ...but never answered

		bundle.proxy.Restore()
		requireEcho(t, c, "hello?")
	})

	t.Run("CutClosesBlackholedConnections", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		frozen := dial(t, bundle.proxy.Addr())
		send(t, frozen, "warm")
		requireEcho(t, frozen, "warm")
		bundle.proxy.Blackhole()
		held := dial(t, bundle.proxy.Addr())
		send(t, held, "x")
		send(t, frozen, "y")

		bundle.proxy.Cut()
		requireClosed(t, held)
		requireClosed(t, frozen)
	})

	t.Run("TargetDownClosesConnections", func(t *testing.T) {
		t.Parallel()
		// A port that was free a moment ago: nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		target := ln.Addr().String()
		_ = ln.Close()

		p, err := faultproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		requireClosed(t, dial(t, p.Addr()))
	})

	t.Run("RefusesMalformedTarget", func(t *testing.T) {
		t.Parallel()
		if p, err := faultproxy.New("no-port"); err == nil {
			_ = p.Close()
			t.Fatal("New accepted a target without a port")
		}
	})

	t.Run("CloseIsIdempotent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		if err := bundle.proxy.Close(); err != nil {
			t.Fatalf("first close: %v", err)
		}
		if err := bundle.proxy.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		bundle.proxy.Restore() // a closed proxy stays closed
		if c, err := net.DialTimeout("tcp", bundle.proxy.Addr(), patience); err == nil {
			defer c.Close()
			requireClosed(t, c)
		}
	})
}

// TestProxyPostgreSQL runs the PostgreSQL wire protocol through the proxy, as
// the intake tests and the soak program do.
func TestProxyPostgreSQL(t *testing.T) {
	t.Parallel()

	setupPG := func(t *testing.T) (*faultproxy.Proxy, string) {
		t.Helper()
		u, err := url.Parse(dbtest.ServerURL())
		if err != nil {
			t.Fatal(err)
		}
		p, err := faultproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		u.Host = p.Addr()
		return p, u.String()
	}
	connect := func(t *testing.T, dsn string) *pgx.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect through the proxy: %v", err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	query := func(conn *pgx.Conn, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}

	t.Run("CutBreaksConnectionsAndRestoreAllowsNewOnes", func(t *testing.T) {
		t.Parallel()
		p, dsn := setupPG(t)
		conn := connect(t, dsn)
		if err := query(conn, patience); err != nil {
			t.Fatal(err)
		}
		p.Cut()
		if err := query(conn, patience); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("query over a cut connection: %v; want a broken connection at once", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			_ = c.Close(ctx)
			t.Fatal("connected while cut")
		}

		p.Restore()
		if err := query(connect(t, dsn), patience); err != nil {
			t.Fatalf("after restore: %v", err)
		}
	})

	t.Run("BlackholeHangsQueriesUntilRestore", func(t *testing.T) {
		t.Parallel()
		p, dsn := setupPG(t)
		conn := connect(t, dsn)
		p.Blackhole()
		if err := query(conn, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("query while blackholed: %v; want the context's deadline", err)
		}

		p.Restore()
		if err := query(connect(t, dsn), patience); err != nil {
			t.Fatalf("after restore: %v", err)
		}
	})
}

// TestCloseEndsEveryGoroutine is not parallel: it counts the goroutines of
// all proxies, so it must run while no other test has one.
func TestCloseEndsEveryGoroutine(t *testing.T) {
	bundle := setup(t)
	p := bundle.proxy

	// One connection of each kind: forwarding, frozen by the blackhole,
	// and held (accepted during the blackhole, never dialled).
	forwarded := dial(t, p.Addr())
	send(t, forwarded, "a")
	requireEcho(t, forwarded, "a")
	frozen := dial(t, p.Addr())
	send(t, frozen, "b")
	requireEcho(t, frozen, "b")
	p.Blackhole()
	send(t, frozen, "c")
	held := dial(t, p.Addr())
	send(t, held, "d")
	requireSilent(t, held)

	if len(proxyGoroutines()) == 0 {
		t.Fatal("found no proxy goroutine while the proxy runs: the check is blind")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if leaked := lingeringProxyGoroutines(); len(leaked) > 0 {
		t.Fatalf("%d goroutines still run after Close returned:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
	requireClosed(t, forwarded)
	requireClosed(t, frozen)
	requireClosed(t, held)
}
