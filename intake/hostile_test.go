package intake_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// hostileServer is the public API behind a real http.Server configured as
// cmd/api configures it (MaxHeaderBytes 1 MiB; ReadHeaderTimeout,
// ReadTimeout and WriteTimeout in the same relation), with the timeouts
// shortened so that slow clients are found out in seconds.
type hostileServer struct {
	addr string
	pool *pgxpool.Pool
	srv  *http.Server
	logs *testkit.LockedBuffer
}

type hostileServerOpts struct {
	readHeaderTimeout time.Duration // cmd/api: 10s
	readTimeout       time.Duration // cmd/api: 30s
}

func newHostileServer(t *testing.T, opts hostileServerOpts) *hostileServer {
	t.Helper()
	_, pool := dbtest.New(t)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	clients, err := callers.ParseAPIClients(fmt.Sprintf("a=%s,b=%s", tokenHash(tokenA), tokenHash(tokenB)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LockedBuffer{}
	const requestTimeout = 30 * time.Second // never the cause of an answer here
	st := store.New(pool)
	st.UseJobs(jobs.NewQueue(riverClient, nil))
	handler := intake.NewHandler(&intake.HandlerOpts{
		HashKey:        lead.HashKey("intake-test-pii-hash-key-0123456789"),
		Store:          st,
		Callers:        callers.NewHolder(clients),
		RequestTimeout: requestTimeout,
		Logger:         slog.New(slog.NewTextHandler(logs, nil)),
	})
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: opts.readHeaderTimeout,
		ReadTimeout:       opts.readTimeout,
		WriteTimeout:      opts.readTimeout + requestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(slog.NewTextHandler(logs, nil), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
			srv.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return &hostileServer{addr: ln.Addr().String(), pool: pool, srv: srv, logs: logs}
}

// dial opens a raw connection to the server; the test closes it.
func (s *hostileServer) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.addr, testkit.Patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// answer is what a raw connection received: a response, or the connection
// ending without one.
type answer struct {
	res    *http.Response
	body   []byte
	err    error // why no response was read: the connection ended
	waited time.Duration
}

// readAnswer reads one response from conn in the background, within
// testkit.Patience. The channel yields exactly once.
func readAnswer(conn net.Conn) <-chan answer {
	ch := make(chan answer, 1)
	start := time.Now()
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(testkit.Patience))
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			ch <- answer{err: err, waited: time.Since(start)}
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		ch <- answer{res: res, body: body, waited: time.Since(start)}
	}()
	return ch
}

// requireNoHang fails the test unless the connection was answered or
// closed, and did not merely hit readAnswer's deadline.
func requireNoHang(t *testing.T, a answer) {
	t.Helper()
	var ne net.Error
	if a.err != nil && errors.As(a.err, &ne) && ne.Timeout() {
		t.Fatalf("no answer and the connection still open after %s: the server hangs", a.waited)
	}
}

// trickle writes parts to conn one every interval until they run out, the
// connection fails, or stop is closed. It returns how many it wrote.
func trickle(conn net.Conn, interval time.Duration, stop <-chan struct{}, parts func(i int) (string, bool)) int {
	for i := 0; ; i++ {
		part, ok := parts(i)
		if !ok {
			return i
		}
		_ = conn.SetWriteDeadline(time.Now().Add(testkit.Patience))
		if _, err := io.WriteString(conn, part); err != nil {
			return i
		}
		select {
		case <-stop:
			return i + 1
		case <-time.After(interval):
		}
	}
}

// serverConnGoroutines counts the goroutines serving an HTTP connection.
// The hostile tests do not run in parallel with others (parallel tests wait
// until every sequential one has finished), so they are this server's.
func serverConnGoroutines() (int, []string) {
	var stacks []string
	for _, g := range goroutineStacks() {
		if strings.Contains(g, "net/http.(*conn).serve") {
			stacks = append(stacks, g)
		}
	}
	return len(stacks), stacks
}

// requireConnectionsReleased waits, up to a grace period, until the server
// holds no connection goroutine: whatever a hostile client did, the server
// let its connection go.
func requireConnectionsReleased(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, stacks := serverConnGoroutines()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connection goroutines still running:\n\n%s", n, strings.Join(stacks, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requireGoroutinesBackTo waits, up to a grace period, until no more
// goroutines run than before (baseline), and lists the new ones if not.
func requireGoroutinesBackTo(t *testing.T, baseline []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := goroutineStacks()
		if len(now) <= len(baseline) {
			return
		}
		if time.Now().After(deadline) {
			before := map[string]bool{}
			for _, g := range baseline {
				before[goroutineHeader(g)] = true
			}
			var extra []string
			for _, g := range now {
				if !before[goroutineHeader(g)] {
					extra = append(extra, g)
				}
			}
			t.Fatalf("%d goroutines before, %d after; new ones:\n\n%s", len(baseline), len(now), strings.Join(extra, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goroutineHeader is the "goroutine N [state]:" line's id part.
func goroutineHeader(stack string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
	return id
}

// submissionHead is the head of a POST /v1/leads from client a, up to and
// including the blank line; extra holds more header lines.
func submissionHead(key string, contentLength int, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST /v1/leads HTTP/1.1\r\nHost: leadintake.test\r\n")
	b.WriteString("Authorization: Bearer " + tokenA + "\r\n")
	b.WriteString("Idempotency-Key: " + key + "\r\n")
	b.WriteString("Content-Type: application/json\r\n")
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", contentLength)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// TestHostileClients sends what a hostile or broken client sends to a real
// http.Server around the API: oversized headers, headers and bodies
// trickled past the server's time-outs, JSON nested ten thousand deep. Each
// gets a clean 4xx or a closed connection, in bounded time, never a 5xx;
// nothing is stored; and no goroutine outlives the connections.
//
// Not parallel: it counts goroutines, and parallel tests only start once
// every sequential test has finished.
func TestHostileClients(t *testing.T) {
	const (
		readHeaderTimeout = 500 * time.Millisecond
		readTimeout       = 2 * time.Second
	)
	baseline := goroutineStacks()
	t.Run("Everything", func(t *testing.T) {
		s := newHostileServer(t, hostileServerOpts{readHeaderTimeout: readHeaderTimeout, readTimeout: readTimeout})

		t.Run("OversizedHeadersGet431", func(t *testing.T) {
			for name, header := range map[string]string{
				"OneHugeHeader":    "X-Padding: " + strings.Repeat("a", 1<<20+64<<10) + "\r\n",
				"ManySmallHeaders": strings.Repeat("X-Padding: "+strings.Repeat("b", 100)+"\r\n", (1<<20+64<<10)/113),
			} {
				t.Run(name, func(t *testing.T) {
					conn := s.dial(t)
					answered := readAnswer(conn)
					// The server may answer and close before it has read
					// everything: a failed write is expected.
					_, _ = io.WriteString(conn, "POST /v1/leads HTTP/1.1\r\nHost: leadintake.test\r\n"+header+"\r\n")
					a := <-answered
					requireNoHang(t, a)
					if a.res == nil {
						t.Fatalf("no reply to %d bytes of headers: %v", len(header), a.err)
					}
					if a.res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
						t.Fatalf("status %d %s, want 431", a.res.StatusCode, a.body)
					}
				})
			}
		})

		t.Run("HeadersUnderTheLimitAreRead", func(t *testing.T) {
			// Just under 1 MiB in all: the request is read, and refused
			// for what it is (no credentials), not for its size.
			padding := strings.Repeat("c", 1<<20-8<<10)
			conn := s.dial(t)
			answered := readAnswer(conn)
			_, _ = io.WriteString(conn, "GET /v1/operations/key-0000000001 HTTP/1.1\r\nHost: leadintake.test\r\nX-Padding: "+padding+"\r\n\r\n")
			a := <-answered
			requireNoHang(t, a)
			if a.res == nil || a.res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("answer %+v %s %v, want 401", a.res, a.body, a.err)
			}
		})

		t.Run("HeadersTrickledPastReadHeaderTimeoutAreDropped", func(t *testing.T) {
			conn := s.dial(t)
			answered := readAnswer(conn)
			stop := make(chan struct{})
			wrote := make(chan int, 1)
			go func() {
				wrote <- trickle(conn, 100*time.Millisecond, stop, func(i int) (string, bool) {
					if i == 0 {
						return "POST /v1/leads HTTP/1.1\r\nHost: leadintake.test\r\n", true
					}
					// A header line every 100 ms, for up to a minute: the
					// headers never end.
					return fmt.Sprintf("X-Slow-%d: %d\r\n", i, i), i < 600
				})
			}()
			a := <-answered
			close(stop)
			n := <-wrote
			requireNoHang(t, a)
			if a.res != nil && a.res.StatusCode >= 500 {
				t.Fatalf("status %d %s, want the connection dropped or a 4xx", a.res.StatusCode, a.body)
			}
			if n >= 600 {
				t.Fatalf("the server read headers trickled for a minute")
			}
			t.Logf("connection ended after %s and %d header lines (ReadHeaderTimeout %s): reply %v, error %v",
				a.waited.Round(time.Millisecond), n, readHeaderTimeout, status(a.res), a.err)
			requireConnectionsReleased(t)
		})

		t.Run("BodyTrickledPastReadTimeoutIsRefused", func(t *testing.T) {
			for name, chunked := range map[string]bool{"ContentLength": false, "Chunked": true} {
				t.Run(name, func(t *testing.T) {
					key := testkit.NewKey()
					head := submissionHead(key, len(validBody))
					if chunked {
						head = submissionHead(key, -1, "Transfer-Encoding: chunked")
					}
					conn := s.dial(t)
					answered := readAnswer(conn)
					stop := make(chan struct{})
					wrote := make(chan int, 1)
					go func() {
						// One byte of the body every 250 ms: the body
						// would take about 20 s, ten times ReadTimeout.
						wrote <- trickle(conn, 250*time.Millisecond, stop, func(i int) (string, bool) {
							switch {
							case i == 0:
								return head, true
							case i > len(validBody):
								if chunked {
									return "0\r\n\r\n", i == len(validBody)+1
								}
								return "", false
							case chunked:
								return "1\r\n" + validBody[i-1:i] + "\r\n", true
							default:
								return validBody[i-1 : i], true
							}
						})
					}()
					a := <-answered
					close(stop)
					n := <-wrote
					requireNoHang(t, a)
					if a.res != nil && (a.res.StatusCode < 400 || a.res.StatusCode >= 500) {
						t.Fatalf("status %d %s, want a 4xx or the connection closed", a.res.StatusCode, a.body)
					}
					if n > len(validBody) {
						t.Fatalf("the whole body was read, trickled over %s", time.Duration(n)*250*time.Millisecond)
					}
					t.Logf("answered after %s and %d body bytes (ReadTimeout %s): reply %v %s, error %v",
						a.waited.Round(time.Millisecond), n-1, readTimeout, status(a.res), a.body, a.err)
					if keyStored(t, s.pool, "a", key) {
						t.Fatal("a request whose body never arrived claimed its key")
					}
					requireConnectionsReleased(t)
				})
			}
		})

		t.Run("DeeplyNestedJSONIsRefusedQuickly", func(t *testing.T) {
			const depth = 10000
			bodies := map[string]string{
				"Arrays":  strings.Repeat("[", depth) + strings.Repeat("]", depth),
				"Objects": strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth),
				"InsideALead": `{"email":"ada@example.com","source":"website","utm":` +
					strings.Repeat(`{"a":`, depth) + `"x"` + strings.Repeat("}", depth) + `}`,
				"UnclosedToTheLimit": `{"utm":` + strings.Repeat("[", intake.DefaultMaxBodyBytes-len(`{"utm":`)),
			}
			client := &http.Client{Timeout: testkit.Patience}
			for name, body := range bodies {
				t.Run(name, func(t *testing.T) {
					key := testkit.NewKey()
					req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/leads", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Authorization", "Bearer "+tokenA)
					req.Header.Set("Idempotency-Key", key)
					req.Header.Set("Content-Type", "application/json")
					start := time.Now()
					res, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil {
						t.Fatal(err)
					}
					took := time.Since(start)
					r := &reply{Status: res.StatusCode, Header: res.Header, Body: got}
					r.requireError(t, http.StatusBadRequest, response.CodeInvalidJSON)
					// "Quickly": far below any time-out, with room for a slow
					// machine under the race detector.
					if took > 10*time.Second {
						t.Fatalf("refused after %s", took)
					}
					if keyStored(t, s.pool, "a", key) {
						t.Fatal("a refused body claimed its key")
					}
				})
			}
			client.CloseIdleConnections()
			requireConnectionsReleased(t)
		})

		requireRows(t, s.pool, rowCounts{})
	})
	// The server and the database pool are closed by now: every goroutine
	// they started must be gone.
	requireGoroutinesBackTo(t, baseline)
}

func status(res *http.Response) string {
	if res == nil {
		return "none"
	}
	return res.Status
}

// TestTenantIsolation fills what TestClientsAreIsolated leaves out: a key
// another client has finished, failed or used with another payload is, to
// this client, a key like any other. Nothing in the answer says that another
// client uses it.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()

	const otherBody = `{"email":"eve@example.com","source":"linkedin"}`
	asB := withHeader("Authorization", "Bearer "+tokenB)

	type testBundle struct {
		api    *testAPI
		key    string
		leadID string // client a's
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		api := newTestAPI(t, nil)
		key := testkit.NewKey()
		first := api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
		return &testBundle{api: api, key: key, leadID: first.LeadID}
	}
	// requireOwnClaim checks that b's submission was a claim of its own.
	requireOwnClaim := func(t *testing.T, bundle *testBundle, res *reply) {
		t.Helper()
		b := res.requireAccepted(t, bundle.key, false)
		if b.LeadID == bundle.leadID {
			t.Fatalf("client b got client a's lead %s", b.LeadID)
		}
	}

	t.Run("FinishedKeyIsNotReplayedToAnotherClient", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const stored = `{"status":"completed","secret":"client a's answer"}`
		finishKey(t, bundle.api, bundle.key, finish{Body: stored})

		res := bundle.api.send(t, bundle.api.submission(bundle.key, validBody, asB))
		if bytes.Contains(res.Body, []byte("client a's answer")) {
			t.Fatalf("client b was replayed client a's answer: %d %s", res.Status, res.Body)
		}
		requireOwnClaim(t, bundle, res)
		// Client a still gets its own.
		if res := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)); res.Status != http.StatusCreated || string(res.Body) != stored {
			t.Fatalf("client a's replay: %d %s", res.Status, res.Body)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 2, Jobs: 2})
	})

	t.Run("OtherPayloadIsNotAMismatchForAnotherClient", func(t *testing.T) {
		t.Parallel()
		for _, finished := range []bool{false, true} {
			bundle := setup(t)
			if finished {
				finishKey(t, bundle.api, bundle.key, finish{})
			}
			// A 422 idempotency_key_reused would tell b that a uses the key.
			requireOwnClaim(t, bundle, bundle.api.send(t, bundle.api.submission(bundle.key, otherBody, asB)))
		}
	})

	t.Run("AnotherClientCannotReopenAFailedKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		stored := `{"status":"failed","lead_id":"` + bundle.leadID + `","error":{"code":"downstream_unavailable","message":"try later"}}`
		finishKey(t, bundle.api, bundle.key, finish{
			State: string(lead.KeyFailed), FailureCode: response.CodeDownstreamUnavailable, Status: http.StatusBadGateway, Body: stored,
		})
		requireOwnClaim(t, bundle, bundle.api.send(t, bundle.api.submission(bundle.key, validBody, asB)))
		op := getOperation(t, bundle.api, bundle.key)
		if op.State != string(lead.KeyFailed) || op.LeadID != bundle.leadID || op.Response == nil || op.Response.Status != http.StatusBadGateway {
			t.Fatalf("client a's key after client b's submission: %+v, want it failed as before", op)
		}
		// Client a's job count did not move: one job each.
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 2, Jobs: 2})
	})

	t.Run("StatusOfAnotherClientsKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		unknown := bundle.api.send(t, bundle.api.operation(tokenB, testkit.NewKey()))
		unknown.requireError(t, http.StatusNotFound, response.CodeNotFound)
		for _, f := range []*finish{nil, {}} {
			if f != nil {
				finishKey(t, bundle.api, bundle.key, *f)
			}
			res := bundle.api.send(t, bundle.api.operation(tokenB, bundle.key))
			res.requireError(t, http.StatusNotFound, response.CodeNotFound)
			// The same answer as for a key nobody has.
			if !bytes.Equal(res.Body, unknown.Body) {
				t.Fatalf("another client's key: %s; an unknown key: %s", res.Body, unknown.Body)
			}
		}
	})

	t.Run("XClientIDCannotNameAnotherClientOnStatus", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		req := bundle.api.operation(tokenB, bundle.key)
		req.Header.Set("X-Client-Id", "a")
		bundle.api.send(t, req).requireError(t, http.StatusForbidden, response.CodeClientMismatch)
	})
}

// goroutineStacks returns the stack of every goroutine.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
