package email_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/destinationtest"
	"github.com/leadintake/leadintake/destination/email"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) {
	// The TLS Mailpits present a certificate made here: trust it the way
	// an operator trusts a private CA, before the first handshake loads
	// the roots. The product's verification stays on.
	c, err := mailpittest.Cert()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mailpittest certificate:", err)
		os.Exit(1)
	}
	os.Setenv("SSL_CERT_FILE", c.CertFile)
	testkit.AtExit(c.Remove)
	testkit.Main(m)
}

const (
	domain = "leads.acme.example"
	from   = "Leadintake <notify@" + domain + ">"
)

var to = []string{"sales@acme.example", "Sales Lead <lead@acme.example>"}

// config is the destination for s.
func config(s *mailpittest.Server, mode string, auth bool) *destination.Config {
	c := &destination.Config{Name: "sales-mail", Kind: email.Kind, Timeout: 5 * time.Second,
		Values: map[string]string{"host": s.Host, "port": fmt.Sprint(s.Port), "tls": mode, "from": from},
		Lists:  map[string][]string{"to": to}}
	if auth {
		c.Values["username"], c.Values["password"] = mailpittest.User, mailpittest.Password
	}
	return c
}

func newChannel(t *testing.T, c *destination.Config) *email.Channel {
	t.Helper()
	if err := email.Spec.Validate(c); err != nil {
		t.Fatal(err)
	}
	ch, err := email.Spec.NewChannel(c)
	if err != nil {
		t.Fatal(err)
	}
	return ch.(*email.Channel)
}

// standIn drives Mailpit as the suite asks: its chaos mode answers reply
// codes, the proxy in front of it loses answers.
type standIn struct {
	t *testing.T
	s *mailpittest.Server
}

func (m standIn) Inject(f destinationtest.Fault) {
	var err error
	switch f {
	case destinationtest.LoseAnswer:
		m.s.LoseAnswers(1)
	case destinationtest.FailServer:
		err = m.s.Chaos(mailpittest.Sender, 451) // local error in processing
	case destinationtest.RateLimit:
		err = m.s.Chaos(mailpittest.Sender, 421) // service not available
	case destinationtest.RejectMessage:
		err = m.s.Chaos(mailpittest.Recipient, 550) // mailbox unavailable
	case destinationtest.RefuseCredentials:
		err = m.s.Chaos(mailpittest.Authentication, 535)
	case destinationtest.Restore:
		err = m.s.Chaos(mailpittest.Authentication, 0)
	}
	if err != nil {
		m.t.Fatal(err)
	}
}

// ids are the Message-IDs of ref's messages as Mailpit received them,
// newest first, repeats included.
func (m standIn) ids(ref string) []mailpittest.Summary {
	ms, err := m.s.Messages()
	if err != nil {
		m.t.Fatal(err)
	}
	var out []mailpittest.Summary
	for _, s := range ms {
		rest, ok := strings.CutPrefix(s.MessageID, ref+".notify")
		if ok && (strings.HasPrefix(rest, "@") || strings.HasPrefix(rest, ".")) {
			out = append(out, s)
		}
	}
	return out
}

func (m standIn) Messages(ref string) int { return len(m.ids(ref)) }

func (m standIn) Distinct(ref string) int {
	seen := map[string]bool{}
	for _, s := range m.ids(ref) {
		seen[s.MessageID] = true
	}
	return len(seen)
}

// Text is the text of ref's latest message: the highest amendment's (its
// Message-ID says which), the newest delivery of it.
func (m standIn) Text(ref string) string {
	latest, n := "", -1
	for _, s := range m.ids(ref) {
		rest := strings.TrimPrefix(s.MessageID, ref+".notify")
		amendment := 0
		if num, ok := strings.CutPrefix(rest, "."); ok {
			num, _, _ = strings.Cut(num, "@")
			amendment, _ = strconv.Atoi(num)
		}
		if amendment > n {
			latest, n = s.ID, amendment
		}
	}
	if latest == "" {
		return ""
	}
	msg, err := m.s.Message(latest)
	if err != nil {
		m.t.Fatal(err)
	}
	return msg.Text
}

func TestConformance(t *testing.T) {
	destinationtest.RunChannel(t, destinationtest.ChannelHarness{
		New: func(t *testing.T) (destination.Channel, destinationtest.ChannelSetup) {
			// Plain SMTP on loopback: the proxy reads the dialogue to lose
			// the 250 after the final dot. STARTTLS and implicit TLS are
			// tested below.
			s := mailpittest.Start(t, mailpittest.Options{Auth: true})
			ch := newChannel(t, config(s, email.TLSNone, true))
			return ch, destinationtest.ChannelSetup{StandIn: standIn{t, s}, Secrets: []string{mailpittest.Password}}
		},
	})
}

// observed collects the delivery log's observations of ctx.
type observed struct {
	mu  sync.Mutex
	obs []destination.Observation
}

func (o *observed) ctx() context.Context {
	return destination.WithObserver(context.Background(), func(ob destination.Observation) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.obs = append(o.obs, ob)
	})
}

func (o *observed) outcomes() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, ob := range o.obs {
		if ob.Step != "notification" {
			out = append(out, "step "+ob.Step)
		}
		out = append(out, ob.Outcome)
	}
	return out
}

func TestSendsOverEveryTLSMode(t *testing.T) {
	for _, mode := range []string{mailpittest.StartTLS, mailpittest.Implicit} {
		t.Run(mode, func(t *testing.T) {
			s := mailpittest.Start(t, mailpittest.Options{TLS: mode, Auth: true})
			ch := newChannel(t, config(s, mode, true))
			r := destinationtest.Record(t)
			var o observed
			if _, err := ch.Send(o.ctx(), r, ""); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Count(email.MessageID(r, domain)); err != nil || n != 1 {
				t.Fatalf("%d messages (%v), want 1", n, err)
			}
			if got := o.outcomes(); !slices.Equal(got, []string{"250"}) {
				t.Errorf("delivery log %v, want one call, 250", got)
			}
			if err := ch.Check(context.Background()); err != nil {
				t.Errorf("check: %v", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	s := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.StartTLS, Auth: true})
	if err := newChannel(t, config(s, email.TLSStartTLS, true)).Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	if ms, err := s.Messages(); err != nil || len(ms) != 0 {
		t.Errorf("a check sent %d messages (%v)", len(ms), err)
	}

	t.Run("WrongPassword", func(t *testing.T) {
		c := config(s, email.TLSStartTLS, true)
		c.Values["password"] = "not-the-password-91c2"
		err := newChannel(t, c).Check(ctx)
		requireError(t, err, destination.Unauthorized, 535)
		if strings.Contains(err.Error(), "not-the-password-91c2") {
			t.Errorf("error %q shows the password", err)
		}
	})
	t.Run("NoCredentialsWhereRequired", func(t *testing.T) {
		// Mailpit asks for authentication at MAIL (530): a check without
		// credentials connects and quits, a send is refused.
		c := config(s, email.TLSStartTLS, false)
		ch := newChannel(t, c)
		if err := ch.Check(ctx); err != nil {
			t.Errorf("check: %v", err)
		}
		_, err := ch.Send(ctx, destinationtest.Record(t), "")
		requireError(t, err, destination.Unauthorized, 530)
	})
	t.Run("WrongTLSMode", func(t *testing.T) {
		// Implicit TLS against a port that speaks plain SMTP first.
		err := newChannel(t, config(s, email.TLSImplicit, true)).Check(ctx)
		requireError(t, err, destination.Transient, 0)
	})
	t.Run("NobodyListening", func(t *testing.T) {
		c := config(s, email.TLSStartTLS, true)
		c.Values["port"] = "1"
		err := newChannel(t, c).Check(ctx)
		requireError(t, err, destination.Transient, 0)
		if e, _ := destination.AsError(err); e.Uncertain {
			t.Errorf("a refused connection is uncertain: %v", err)
		}
	})
}

func TestTLSIsVerified(t *testing.T) {
	ctx := context.Background()
	// A certificate nobody trusts, over either TLS mode: refused before
	// a word of SMTP, and held as refused credentials.
	for _, mode := range []string{mailpittest.StartTLS, mailpittest.Implicit} {
		s := mailpittest.Start(t, mailpittest.Options{TLS: mode, Untrusted: true})
		ch := newChannel(t, config(s, mode, false))
		err := ch.Check(ctx)
		requireError(t, err, destination.Unauthorized, 0)
		if e, _ := destination.AsError(err); e.Code != "tls_certificate" {
			t.Errorf("%s: code %q, want tls_certificate: %v", mode, e.Code, err)
		}
		_, err = ch.Send(ctx, destinationtest.Record(t), "")
		requireError(t, err, destination.Unauthorized, 0)
		if ms, _ := s.Messages(); len(ms) != 0 {
			t.Errorf("%s: %d messages through an untrusted certificate", mode, len(ms))
		}
	}

	t.Run("NoSTARTTLSOffered", func(t *testing.T) {
		plain := mailpittest.Start(t, mailpittest.Options{})
		c := config(plain, email.TLSStartTLS, false)
		err := newChannel(t, c).Check(ctx)
		requireError(t, err, destination.Unauthorized, 0)
		if e, _ := destination.AsError(err); e.Code != "starttls_unavailable" {
			t.Errorf("code %q, want starttls_unavailable: %v", e.Code, err)
		}
		if _, err := newChannel(t, c).Send(ctx, destinationtest.Record(t), ""); err == nil {
			t.Error("a message went without the STARTTLS the destination asks for")
		}
		if ms, _ := plain.Messages(); len(ms) != 0 {
			t.Errorf("%d messages in clear", len(ms))
		}
	})
}

// TestReplyCodes drives every stage of a session into Mailpit's chaos and
// reads the class, the uncertainty and the delivery log's outcome.
func TestReplyCodes(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{Auth: true})
	ch := newChannel(t, config(s, email.TLSNone, true))
	for _, tc := range []struct {
		stage mailpittest.Stage
		code  int
		class destination.Class
	}{
		{mailpittest.Sender, 421, destination.Transient},
		{mailpittest.Sender, 451, destination.Transient},
		{mailpittest.Recipient, 452, destination.Transient},
		{mailpittest.Sender, 550, destination.Rejected},
		{mailpittest.Recipient, 550, destination.Rejected},
		{mailpittest.Recipient, 553, destination.Rejected},
		{mailpittest.Sender, 530, destination.Unauthorized},
		{mailpittest.Authentication, 535, destination.Unauthorized},
		{mailpittest.Authentication, 534, destination.Unauthorized},
		{mailpittest.Authentication, 454, destination.Transient},
	} {
		t.Run(fmt.Sprintf("%s%d", tc.stage, tc.code), func(t *testing.T) {
			if err := s.Chaos(tc.stage, tc.code); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Chaos(tc.stage, 0); err != nil {
					t.Fatal(err)
				}
			}()
			var o observed
			r := destinationtest.Record(t)
			_, err := ch.Send(o.ctx(), r, "")
			requireError(t, err, tc.class, tc.code)
			e, _ := destination.AsError(err)
			if e.Uncertain {
				t.Errorf("a reply before the final dot is uncertain: %v", err)
			}
			if tc.class == destination.Transient && e.RetryAfter != email.Pause {
				t.Errorf("retry after %v, want %v", e.RetryAfter, email.Pause)
			}
			if e.HoldAll != (tc.code == 421) {
				t.Errorf("hold all %v for %d", e.HoldAll, tc.code)
			}
			if got := o.outcomes(); !slices.Equal(got, []string{fmt.Sprint(tc.code)}) {
				t.Errorf("delivery log %v, want [%d]", got, tc.code)
			}
			if n, _ := s.Count(email.MessageID(r, domain)); n != 0 {
				t.Errorf("%d messages after %d", n, tc.code)
			}
		})
	}
}

func TestLostAnswerIsUncertainAndRepeatsTheSameMessage(t *testing.T) {
	ctx := context.Background()
	s := mailpittest.Start(t, mailpittest.Options{Auth: true})
	ch := newChannel(t, config(s, email.TLSNone, true))
	r := destinationtest.Record(t)
	s.LoseAnswers(1)
	var o observed
	_, err := ch.Send(o.ctx(), r, "")
	requireError(t, err, destination.Transient, 0)
	if e, _ := destination.AsError(err); !e.Uncertain {
		t.Errorf("a lost answer after the final dot is certain: %v", err)
	}
	if got := o.outcomes(); !slices.Equal(got, []string{destination.OutcomeConnectionError}) {
		t.Errorf("delivery log %v, want [connection_error]", got)
	}
	if _, err := ch.Send(ctx, r, ""); err != nil {
		t.Fatal(err)
	}
	id := email.MessageID(r, domain)
	if n, _ := s.Count(id); n != 2 {
		t.Errorf("%d deliveries of %s, want 2 (the lost one and the repeat)", n, id)
	}
	ms, _ := s.Messages()
	raw0, _ := s.Raw(ms[0].ID)
	raw1, _ := s.Raw(ms[1].ID)
	if body(raw0) != body(raw1) {
		t.Error("the repeat's text differs from the first attempt's")
	}
}

func body(raw []byte) string {
	_, b, _ := strings.Cut(string(raw), "\r\n\r\n")
	return b
}

func TestTimeOutBoundsTheSession(t *testing.T) {
	// A server that accepts the connection and never greets.
	s := mailpittest.Start(t, mailpittest.Options{})
	c := config(s, email.TLSNone, false)
	c.Timeout = 300 * time.Millisecond
	c.Values["port"] = fmt.Sprint(silentPort(t))
	var o observed
	start := time.Now()
	_, err := newChannel(t, c).Send(o.ctx(), destinationtest.Record(t), "")
	requireError(t, err, destination.Transient, 0)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the session took %v with a time-out of 300ms", d)
	}
	if got := o.outcomes(); !slices.Equal(got, []string{destination.OutcomeTimeout}) {
		t.Errorf("delivery log %v, want [timeout]", got)
	}
}

func requireError(t *testing.T, err error, class destination.Class, code int) {
	t.Helper()
	e, ok := destination.AsError(err)
	if !ok {
		t.Fatalf("error %v, want a %s *destination.Error", err, class)
	}
	if e.Class != class || code != 0 && e.Status != code {
		t.Fatalf("error %v: class %s, reply %d; want %s, %d", err, e.Class, e.Status, class, code)
	}
}

// silentPort is a port on 127.0.0.1 that accepts connections and never
// says a word, until the test ends.
func silentPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// TestMessageAsReceived reads the message back from Mailpit: its envelope
// and headers hold no visitor-made header, its recipients are to and the
// owner, and an amendment threads under the first message.
func TestMessageAsReceived(t *testing.T) {
	ctx := context.Background()
	s := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.StartTLS, Auth: true})
	ch := newChannel(t, config(s, email.TLSStartTLS, true))
	r := destinationtest.Record(t)
	l := *r.Lead
	l.Company = "X\r\nBcc: victim@example.com"
	l.Name = "Eve\r\nTo: victim2@example.com"
	r.Lead = &l
	r.Owner = &destination.Owner{Name: "alice", Email: "alice@acme.example"}
	if _, err := ch.Send(ctx, r, ""); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Messages()
	if err != nil || len(ms) != 1 {
		t.Fatalf("%d messages (%v), want 1", len(ms), err)
	}
	m, err := s.Message(ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range m.To {
		got = append(got, a.Address)
	}
	if want := []string{"sales@acme.example", "lead@acme.example", "alice@acme.example"}; !slices.Equal(got, want) {
		t.Errorf("To %v, want %v", got, want)
	}
	// Mailpit lists envelope recipients that no header names as Bcc: an
	// injected RCPT or Bcc would show there.
	if len(m.Bcc) != 0 || len(m.Cc) != 0 {
		t.Errorf("Bcc %v, Cc %v: recipients beyond to and the owner", m.Bcc, m.Cc)
	}
	if len(m.ReplyTo) != 1 || m.ReplyTo[0].Address != r.Lead.Email {
		t.Errorf("Reply-To %v, want the lead's email", m.ReplyTo)
	}
	if want := "New lead (hot, score 85): X Bcc: victim@example.com"; m.Subject != want {
		t.Errorf("subject %q, want %q", m.Subject, want)
	}
	if m.From.Address != "notify@"+domain {
		t.Errorf("From %v", m.From)
	}
	h, err := s.Headers(ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h["Bcc"]) != 0 || len(h["To"]) != 1 {
		t.Errorf("headers %v", h)
	}
	if got := h["Message-Id"]; len(got) != 1 || got[0] != "<"+email.MessageID(r, domain)+">" {
		t.Errorf("Message-ID %v", got)
	}

	amended := *r
	amended.Amendment, amended.Amends = 1, r.LeadID
	if _, err := ch.Send(ctx, &amended, ""); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.Messages()
	h, err = s.Headers(ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	first := "<" + email.MessageID(r, domain) + ">"
	if !slices.Equal(h["In-Reply-To"], []string{first}) || !slices.Equal(h["References"], []string{first}) {
		t.Errorf("the amendment's In-Reply-To %v, References %v; want %s", h["In-Reply-To"], h["References"], first)
	}
	if ms[0].MessageID != email.MessageID(&amended, domain) {
		t.Errorf("the amendment's Message-ID %q", ms[0].MessageID)
	}
}
