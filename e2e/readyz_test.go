package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pgCounter is a TCP proxy before PostgreSQL that counts the round trips
// its clients make: simple queries (a Query message, as a ping sends) and
// extended-protocol exchanges (each ends in a Sync).
type pgCounter struct {
	ln     net.Listener
	target string
	trips  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startPGCounter(t *testing.T, target string) *pgCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &pgCounter{ln: ln, target: target}
	c.wg.Go(c.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		c.mu.Lock()
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.mu.Unlock()
		c.wg.Wait()
	})
	return c
}

func (c *pgCounter) accept() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, client, server)
		c.mu.Unlock()
		c.wg.Go(func() { _, _ = io.Copy(client, server); _ = client.Close() })
		c.wg.Go(func() { c.count(client, server); _ = server.Close() })
	}
}

// count forwards what the client sends, counting its round trips: first
// the untyped startup messages (an SSLRequest or GSSENCRequest, which the
// server answers with one byte, then the StartupMessage), then typed
// messages.
func (c *pgCounter) count(client, server net.Conn) {
	const sslRequest, gssRequest = 80877103, 80877104
	var head [8]byte
	for {
		if _, err := io.ReadFull(client, head[:8]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint32(head[:4]))
		if _, err := server.Write(head[:8]); err != nil {
			return
		}
		if _, err := io.CopyN(server, client, n-8); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(head[4:8]); code != sslRequest && code != gssRequest {
			break
		}
	}
	for {
		if _, err := io.ReadFull(client, head[:5]); err != nil {
			return
		}
		if head[0] == 'Q' || head[0] == 'S' {
			c.trips.Add(1)
		}
		if _, err := server.Write(head[:5]); err != nil {
			return
		}
		if _, err := io.CopyN(server, client, int64(binary.BigEndian.Uint32(head[1:5]))-4); err != nil {
			return
		}
	}
}

// A hundred probes of the api's /readyz at once cost the database one
// check (two should a second pass meanwhile): the probes share it.
func TestReadyzSharesOneCheck(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	u, err := url.Parse(s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	counter := startPGCounter(t, u.Host)
	u.Host = counter.ln.Addr().String()
	s.startAPI("DATABASE_URL=" + u.String())
	if r := s.get("/readyz"); r.status != http.StatusOK {
		t.Fatalf("GET /readyz: %d %s", r.status, r.body)
	}
	if counter.trips.Load() == 0 {
		t.Fatal("no round trip counted: the api does not reach the database through the counter")
	}
	// What the api does meanwhile on its own, in as long as the probes take.
	time.Sleep(1100 * time.Millisecond)
	idleFrom := counter.trips.Load()
	time.Sleep(500 * time.Millisecond)
	idle := counter.trips.Load() - idleFrom

	from := counter.trips.Load()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodGet, s.apiURL+"/readyz", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := s.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /readyz: %d", resp.StatusCode)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	if n := counter.trips.Load() - from - idle; n > 2 {
		t.Errorf("100 probes at once made %d round trips to the database (%d more in %s of idling), want at most 2", n, idle, 500*time.Millisecond)
	}
	t.Logf("100 probes in %s", took)
}
