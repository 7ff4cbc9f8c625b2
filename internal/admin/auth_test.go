package admin_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/operator"
)

// clock is a settable time for the limit on wrong credentials.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// erasures is an Erase that knows one client, "known", and records the
// erasures it is asked for.
type erasures struct {
	mu    sync.Mutex
	asked []string
}

func (e *erasures) erase(_ context.Context, clientID, email string) (int, error) {
	if clientID != "known" {
		return 0, operator.ErrUnknownClient
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, clientID+" "+email)
	return 1, nil
}

func newHandler(t *testing.T, now func() time.Time, e *erasures, logs *testkit.LockedBuffer) http.Handler {
	t.Helper()
	h, err := admin.NewHandler(t.Context(), &admin.Opts{
		Gatherer: prometheus.NewRegistry(), User: "operator", Password: "secret-pw",
		Erase: e.erase, Logger: slogJSON(logs), Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// get sends GET /metrics from addr with user and password ("" for no
// credentials) and returns the status and the Retry-After header.
func get(h http.Handler, addr, user, password string) (int, string) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = addr
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Retry-After")
}

// guessesAtOnce is how many wrong credentials an address may send before it
// must wait.
const guessesAtOnce = 5

// Wrong credentials cost their address time: after a few, its requests are
// 429 with Retry-After, before any check (the right password too, so that a
// guesser learns nothing meanwhile), until the budget refills. Another
// address, and the right password from an address that has guessed little,
// are never held back; no credentials at all is no guess.
func TestWrongCredentialsAreSlowedPerAddress(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := newHandler(t, c.now, &erasures{}, &testkit.LockedBuffer{})
	const guesser, operatorAddr = "203.0.113.7:40000", "198.51.100.2:50000"

	for i := range 20 {
		if code, _ := get(h, guesser, "", ""); code != http.StatusUnauthorized {
			t.Fatalf("request %d without credentials: %d, want 401 (no guess, never limited)", i, code)
		}
	}
	if code, _ := get(h, guesser, "operator", "secret-pw"); code != http.StatusOK {
		t.Fatalf("the right password before any guess: %d", code)
	}
	wrong := 0
	for ; wrong < 100; wrong++ {
		code, retry := get(h, guesser, "operator", "guess")
		if code == http.StatusTooManyRequests {
			if retry != "1" {
				t.Errorf("Retry-After %q, want 1 (a guess a second)", retry)
			}
			break
		}
		if code != http.StatusUnauthorized {
			t.Fatalf("wrong guess %d: %d, want 401", wrong, code)
		}
	}
	if wrong == 100 {
		t.Fatal("100 wrong guesses in a row, none limited")
	}
	if wrong != guessesAtOnce {
		t.Errorf("%d wrong guesses answered 401 before the first 429, want %d", wrong, guessesAtOnce)
	}
	if code, _ := get(h, guesser, "operator", "secret-pw"); code != http.StatusTooManyRequests {
		t.Errorf("the right password from the limited address: %d, want 429 (it is not even checked)", code)
	}
	// A port of its own is the same address; so is another host of the
	// same IPv6 /64.
	if code, _ := get(h, "203.0.113.7:40001", "operator", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("the guesser from another port: %d, want 429", code)
	}
	if code, _ := get(h, operatorAddr, "operator", "secret-pw"); code != http.StatusOK {
		t.Errorf("the right password from another address while one guesses: %d, want 200", code)
	}
	if code, _ := get(h, operatorAddr, "operator", "typo"); code != http.StatusUnauthorized {
		t.Errorf("one typo from another address: %d, want 401", code)
	}
	c.advance(time.Second)
	if code, _ := get(h, guesser, "operator", "guess"); code != http.StatusUnauthorized {
		t.Errorf("a guess a second later: %d, want 401", code)
	}
	if code, _ := get(h, guesser, "operator", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("a second guess within that second: %d, want 429", code)
	}

	for range guessesAtOnce {
		get(h, "[2001:db8:1:2::1]:1000", "operator", "guess")
	}
	if code, _ := get(h, "[2001:db8:1:2::ffff]:1000", "operator", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("another host of the guessing IPv6 /64: %d, want 429", code)
	}
	if code, _ := get(h, "[2001:db8:1:3::1]:1000", "operator", "secret-pw"); code != http.StatusOK {
		t.Errorf("another /64: %d, want 200", code)
	}
}

// An erasure for a client not in force is refused, 422 unknown_client,
// nothing erased, and the id it named is in no log line.
func TestErasureOfAnUnknownClient(t *testing.T) {
	t.Parallel()
	e := &erasures{}
	logs := &testkit.LockedBuffer{}
	h := newHandler(t, nil, e, logs)
	post := func(body string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/admin/erasures", strings.NewReader(body))
		req.SetBasicAuth("operator", "secret-pw")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out.Error.Code
	}
	const ghost = "ghost-Zq81xVb0-client"
	if code, errCode := post(`{"client_id":"` + ghost + `","email":"ada@example.com"}`); code != http.StatusUnprocessableEntity || errCode != "unknown_client" {
		t.Fatalf("unknown client: %d %q, want 422 unknown_client", code, errCode)
	}
	if len(e.asked) != 0 {
		t.Fatalf("erased %v for an unknown client", e.asked)
	}
	if strings.Contains(logs.String(), ghost) || !strings.Contains(logs.String(), "erasure refused: unknown client") {
		t.Fatalf("logs:\n%s\nwant the refusal, without the id", logs)
	}
	if code, _ := post(`{"client_id":"known","email":"ada@example.com"}`); code != http.StatusOK || len(e.asked) != 1 {
		t.Fatalf("known client: %d, %v", code, e.asked)
	}
}

// The admin listener's server ends a request whose body never arrives
// (ReadTimeout), rather than holding its connection for good; it has a
// WriteTimeout too, past the erasure's own bound.
func TestAdminServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := admin.NewServer(newHandler(t, nil, &erasures{}, &testkit.LockedBuffer{}), nil)
	if srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.ReadHeaderTimeout <= 0 {
		t.Fatalf("time-outs: read %s, write %s, header %s", srv.ReadTimeout, srv.WriteTimeout, srv.ReadHeaderTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	auth := base64.StdEncoding.EncodeToString([]byte("operator:secret-pw"))
	// The headers, and the first bytes of a body that never comes whole.
	_, err = conn.Write([]byte("POST /admin/erasures HTTP/1.1\r\nHost: admin\r\nAuthorization: Basic " + auth +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"client_id\":"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(admin.ReadTimeout + testkit.Patience))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("no answer, and the connection still open, %s after the body stopped", time.Since(start).Round(time.Second))
	}
	if err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("a body cut by the read time-out: %d, want 400", res.StatusCode)
		}
	}
	t.Logf("the request was ended %s after its body stopped (%v)", time.Since(start).Round(time.Second), err)
}
