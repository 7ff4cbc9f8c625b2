// Package mailpittest runs Mailpit (github.com/axllent/mailpit), a real
// SMTP server with an HTTP API, for the tests of the email destination
// kind: a process of each test's own on 127.0.0.1 random ports, with or
// without TLS (STARTTLS or implicit, with a certificate made here) and SMTP
// authentication, its messages read through its API, its chaos mode (SMTP
// reply codes on demand) set through the API, and an SMTP-aware proxy in
// front of it that can lose the answer to a message's final dot.
//
// scripts/mailpit.sh installs the pinned Mailpit into ./bin where it is
// missing (make test runs it). Without it a test is skipped, saying so,
// except under CI=true, where it fails.
//
// Mailpit keeps every delivery, repeats of one Message-ID included (it is
// never started with --ignore-duplicate-ids), so a test counts deliveries
// and distinct Message-IDs apart.
package mailpittest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Version is the Mailpit scripts/mailpit.sh installs.
const Version = "v1.33.1"

// The credentials a Mailpit started with Options.Auth accepts.
const (
	User     = "leadintake"
	Password = "mailpit-test-password-7f3a"
)

// TLS modes of a Mailpit.
const (
	// Plain: no TLS at all (a relay on a loopback address).
	Plain = ""
	// StartTLS: STARTTLS offered and required before anything else.
	StartTLS = "starttls"
	// Implicit: TLS from the first byte (port 465 style).
	Implicit = "tls"
)

// Options configure a Mailpit.
type Options struct {
	// TLS is Plain, StartTLS or Implicit; the certificate is Cert's.
	TLS string
	// Auth requires SMTP authentication with User and Password.
	Auth bool
	// Untrusted presents a certificate of its own instead of Cert's: one
	// no client trusts.
	Untrusted bool
}

// Server is a running Mailpit and the proxy in front of its SMTP port.
type Server struct {
	// Host is 127.0.0.1; Port the proxy's port (what a client should use);
	// SMTPPort Mailpit's own.
	Host     string
	Port     int
	SMTPPort int
	// API is the HTTP origin of Mailpit's API and web UI.
	API string

	cmd   *exec.Cmd
	done  chan struct{}
	log   bytes.Buffer
	proxy *Proxy
	http  *http.Client
}

// Binary finds the mailpit executable: $MAILPIT, else bin/mailpit of the
// module this runs in (where scripts/mailpit.sh puts the pinned version),
// else mailpit on PATH.
func Binary() (string, error) {
	if p := os.Getenv("MAILPIT"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "mailpit")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p, nil
	}
	return "", errors.New("no bin/mailpit in the module and no mailpit on PATH")
}

// Require skips the test when Mailpit is missing, except under CI=true,
// where it fails: an e-mail test must not silently disappear there.
func Require(t testing.TB) string {
	t.Helper()
	p, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Mailpit in CI (scripts/mailpit.sh installs %s into ./bin; make test runs it): %v", Version, err)
		}
		t.Skipf("no Mailpit (scripts/mailpit.sh installs %s into ./bin; make test runs it): %v", Version, err)
	}
	return p
}

// Start starts a Mailpit for t (see Require) and stops it with t.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Require(t)
	var (
		s   *Server
		err error
	)
	// A random port found free may be taken before Mailpit binds it: try
	// again with others.
	for range 3 {
		if s, err = Launch(bin, o, t.TempDir()); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("mailpit: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a Mailpit from bin with its database and files in dir.
// Close stops it.
func Launch(bin string, o Options, dir string) (*Server, error) {
	smtpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--smtp", net.JoinHostPort("127.0.0.1", strconv.Itoa(smtpPort)),
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		"--database", filepath.Join(dir, "mailpit.db"),
		"--enable-chaos", "--disable-version-check", "--smtp-disable-rdns", "--quiet",
		// Every message kept: by default Mailpit deletes the oldest beyond
		// 500, and a drill or the soak counts them all.
		"--max", "0",
	}
	if o.TLS != Plain {
		c, err := Cert()
		if o.Untrusted {
			c, err = makeCert(dir)
		}
		if err != nil {
			return nil, err
		}
		args = append(args, "--smtp-tls-cert", c.CertFile, "--smtp-tls-key", c.KeyFile)
		if o.TLS == Implicit {
			args = append(args, "--smtp-require-tls")
		} else {
			args = append(args, "--smtp-require-starttls")
		}
	}
	if o.Auth {
		file := filepath.Join(dir, "smtp-auth")
		if err := os.WriteFile(file, []byte(User+":"+Password+"\n"), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--smtp-auth-file", file)
		if o.TLS == Plain {
			args = append(args, "--smtp-auth-allow-insecure")
		}
	}
	s := &Server{
		Host: "127.0.0.1", SMTPPort: smtpPort, API: "http://127.0.0.1:" + strconv.Itoa(httpPort),
		done: make(chan struct{}), http: &http.Client{Timeout: 10 * time.Second},
	}
	s.cmd = exec.Command(bin, args...)
	out := &lockedWriter{w: &s.log}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(smtpPort); err != nil {
		s.stop()
		return nil, fmt.Errorf("not ready: %v; its output: %s", err, s.output())
	}
	s.proxy, err = NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(smtpPort)), o.TLS != Implicit)
	if err != nil {
		s.stop()
		return nil, err
	}
	s.Port = s.proxy.Port()
	return s, nil
}

func (s *Server) waitReady(smtpPort int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.done:
			return errors.New("mailpit exited")
		default:
		}
		resp, err := s.http.Get(s.API + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(smtpPort)), time.Second)
				if err == nil {
					c.Close()
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no answer within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close stops the proxy and Mailpit.
func (s *Server) Close() {
	if s.proxy != nil {
		s.proxy.Close()
	}
	s.stop()
}

func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func (s *Server) output() string {
	lw := s.cmd.Stdout.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return s.log.String()
}

// Proxy is the SMTP-aware proxy in front of Mailpit's SMTP port.
func (s *Server) Proxy() *Proxy { return s.proxy }

// LoseAnswers makes the proxy drop the server's answer to the final dot of
// the next n messages Mailpit accepts: the message is delivered, the
// client's connection is closed before it hears so.
func (s *Server) LoseAnswers(n int) { s.proxy.LoseAnswers(n) }

// LoseAnswersEvery loses n answers as LoseAnswers does, letting gap
// answers through before each (see Proxy.LoseAnswersEvery).
func (s *Server) LoseAnswersEvery(n, gap int) { s.proxy.LoseAnswersEvery(n, gap) }

// Stage is where Mailpit's chaos answers with an error code.
type Stage string

// The stages of Mailpit's chaos.
const (
	// Sender: MAIL FROM.
	Sender Stage = "Sender"
	// Recipient: RCPT TO.
	Recipient Stage = "Recipient"
	// Authentication: AUTH (Mailpit must require authentication).
	Authentication Stage = "Authentication"
)

// Chaos makes every command of stage answer code (400..599) from now on;
// code 0 stops it.
func (s *Server) Chaos(stage Stage, code int) error {
	type trigger struct{ ErrorCode, Probability int }
	// Mailpit sets all three triggers at once: keep the others as they
	// are.
	var cur map[string]trigger
	if err := s.getJSON("/api/v1/chaos", &cur); err != nil {
		return err
	}
	if code == 0 {
		cur[string(stage)] = trigger{ErrorCode: cur[string(stage)].ErrorCode, Probability: 0}
	} else {
		cur[string(stage)] = trigger{ErrorCode: code, Probability: 100}
	}
	b, _ := json.Marshal(cur)
	req, _ := http.NewRequest(http.MethodPut, s.API+"/api/v1/chaos", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("PUT /api/v1/chaos: %d %s", resp.StatusCode, body)
	}
	return nil
}

// Summary is one message as Mailpit lists it.
type Summary struct {
	ID string
	// MessageID is the message's Message-ID without the angle brackets.
	MessageID string
	Subject   string
	Created   time.Time
}

// Message is one message as Mailpit shows it.
type Message struct {
	ID        string
	MessageID string
	Subject   string
	Text      string
	From      Address
	To        []Address
	Cc        []Address
	Bcc       []Address
	ReplyTo   []Address
}

// Address is an address as Mailpit shows it.
type Address struct{ Name, Address string }

// Messages lists every message Mailpit holds, newest first, repeats of a
// Message-ID included.
func (s *Server) Messages() ([]Summary, error) {
	var out []Summary
	for start := 0; ; start += 500 {
		var page struct {
			Total    int
			Messages []Summary
		}
		if err := s.getJSON("/api/v1/messages?limit=500&start="+strconv.Itoa(start), &page); err != nil {
			return nil, err
		}
		out = append(out, page.Messages...)
		if len(page.Messages) == 0 || len(out) >= page.Total {
			return out, nil
		}
	}
}

// Message reads the message id (Mailpit's id).
func (s *Server) Message(id string) (*Message, error) {
	var m Message
	if err := s.getJSON("/api/v1/message/"+url.PathEscape(id), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Headers reads the header fields of the message id (Mailpit's id), as
// received.
func (s *Server) Headers(id string) (map[string][]string, error) {
	var h map[string][]string
	if err := s.getJSON("/api/v1/message/"+url.PathEscape(id)+"/headers", &h); err != nil {
		return nil, err
	}
	return h, nil
}

// Raw reads the message id (Mailpit's id) as received.
func (s *Server) Raw(id string) ([]byte, error) {
	resp, err := s.http.Get(s.API + "/api/v1/message/" + url.PathEscape(id) + "/raw")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("raw: %d", resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}

// Count is how many deliveries Mailpit holds of the message whose
// Message-ID is id (without angle brackets).
func (s *Server) Count(id string) (int, error) {
	ms, err := s.Messages()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if m.MessageID == id {
			n++
		}
	}
	return n, nil
}

func (s *Server) getJSON(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.API+path, nil)
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
