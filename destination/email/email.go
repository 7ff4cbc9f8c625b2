package email

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "email"

// The values of the member tls.
const (
	// TLSStartTLS: a plain connection upgraded by STARTTLS before
	// anything else (the submission port, 587); the default.
	TLSStartTLS = "starttls"
	// TLSImplicit: TLS from the first byte (port 465).
	TLSImplicit = "tls"
	// TLSNone: no TLS, for a relay on a loopback address only.
	TLSNone = "none"
)

// DefaultPort is the port when none is set: submission (RFC 6409).
const DefaultPort = 587

// MaxRecipients bounds to.
const MaxRecipients = 20

// Pause is the wait a 4xx reply asks for before the lead's next attempt:
// SMTP names no delay of its own, and a temporary failure (greylisting,
// a rate limit, a busy server) is seldom over at once.
const Pause = 30 * time.Second

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyChannel},
	Members: []destination.Member{
		{Name: "host", Required: true},
		{Name: "port"},
		{Name: "tls"},
		{Name: "username"},
		{Name: "password", Secret: true},
		{Name: "from", Required: true},
		{Name: "to", Required: true, List: true},
	},
	Validate: func(c *destination.Config) error {
		_, err := parse(c)
		return err
	},
	NewChannel: func(c *destination.Config) (destination.Channel, error) { return New(c) },
}

// settings are a destination's members, checked.
type settings struct {
	host     string
	port     int
	mode     string
	username string
	password string
	from     *mail.Address
	// domain is from's domain, lower-cased: the right side of every
	// Message-ID.
	domain  string
	to      []*mail.Address
	timeout time.Duration
}

var (
	hostName  = regexp.MustCompile(`^(?i:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.(?i:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?))*\.?$`)
	asciiLine = regexp.MustCompile(`^[\x20-\x7e]*$`)
)

// parse checks c's members. Its errors name the member at fault, never its
// value.
func parse(c *destination.Config) (*settings, error) {
	if c.BaseURL != "" {
		return nil, errors.New("base_url: the email kind is reached at host and port")
	}
	if len(c.Map) > 0 {
		return nil, errors.New("map: the email kind sends the whole lead; map is for the CRM kinds")
	}
	s := &settings{host: strings.TrimSpace(c.Value("host")), port: DefaultPort, mode: TLSStartTLS, timeout: c.Timeout}
	if s.timeout <= 0 {
		s.timeout = destination.DefaultTimeout
	}
	if s.host == "" || len(s.host) > 253 || net.ParseIP(s.host) == nil && !hostName.MatchString(s.host) {
		return nil, errors.New("host must be a host name or an IP address, without a scheme or a port")
	}
	if p := strings.TrimSpace(c.Value("port")); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, errors.New("port must be a number from 1 to 65535")
		}
		s.port = n
	}
	switch m := c.Value("tls"); m {
	case "":
	case TLSStartTLS, TLSImplicit, TLSNone:
		s.mode = m
	default:
		return nil, errors.New("tls must be starttls, tls or none")
	}
	if s.mode == TLSNone && !loopback(s.host) {
		return nil, errors.New("tls: none is for a relay on a loopback address only (127.0.0.1, ::1, localhost); use starttls or tls")
	}
	s.username, s.password = c.Value("username"), c.Value("password")
	switch {
	case (s.username == "") != (s.password == ""):
		return nil, errors.New("username and password go together: set both or neither")
	case strings.ContainsAny(s.username, "\r\n\x00") || strings.ContainsAny(s.password, "\r\n\x00"):
		return nil, errors.New("username and password must be one line each")
	}
	from, err := parseAddress(c.Value("from"))
	if err != nil {
		return nil, fmt.Errorf("from must be one e-mail address (address or Name <address>) in ASCII")
	}
	s.from = from
	s.domain = strings.ToLower(from.Address[strings.LastIndexByte(from.Address, '@')+1:])
	if !hostName.MatchString(s.domain) {
		return nil, errors.New("from: its domain must be a host name (in ASCII: punycode), for the Message-ID")
	}
	to := c.Lists["to"]
	if len(to) == 0 || len(to) > MaxRecipients {
		return nil, fmt.Errorf("to must list 1 to %d addresses, not %d", MaxRecipients, len(to))
	}
	for i, v := range to {
		a, err := parseAddress(v)
		if err != nil {
			return nil, fmt.Errorf("to[%d] must be one e-mail address (address or Name <address>) in ASCII", i)
		}
		s.to = append(s.to, a)
	}
	return s, nil
}

// parseAddress reads one address, as an operator writes it: address, or
// Name <address>. Both must be ASCII: the kind does not ask servers for
// SMTPUTF8.
func parseAddress(v string) (*mail.Address, error) {
	v = strings.TrimSpace(v)
	if v == "" || !asciiLine.MatchString(v) {
		return nil, errors.New("not an address")
	}
	a, err := mail.ParseAddress(v)
	if err != nil || !asciiLine.MatchString(a.Name) {
		return nil, errors.New("not an address")
	}
	return a, nil
}

// loopback reports whether host names this machine: localhost, or an
// address of 127.0.0.0/8 or ::1.
func loopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Channel is an e-mail destination: one message per lead over SMTP.
type Channel struct {
	s   *settings
	tls *tls.Config
}

// New returns the channel c configures.
func New(c *destination.Config) (*Channel, error) {
	s, err := parse(c)
	if err != nil {
		return nil, err
	}
	// Verification stays on: the roots are the system's (SSL_CERT_FILE
	// and SSL_CERT_DIR are honoured), the name is host's.
	return &Channel{s: s, tls: &tls.Config{ServerName: strings.TrimSuffix(s.host, "."), MinVersion: tls.VersionTLS12}}, nil
}

// Capabilities: every attempt sends the same message, under the same
// Message-ID, which receivers and mail clients can tell for a repeat.
// There is no look-up: a drop between the final dot and the 250 reply
// sends it again (at least once).
func (ch *Channel) Capabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{Dedupes: true}
}

// Find is not a capability of the kind.
func (ch *Channel) Find(context.Context, *destination.Record, time.Time) (destination.Receipt, bool, error) {
	return "", false, nil
}

// Send sends r's message in one SMTP transaction to every to and r's
// owner. It keeps no receipt: an amendment is a message of its own,
// threaded under the first by its headers.
func (ch *Channel) Send(ctx context.Context, r *destination.Record, _ destination.Receipt) (destination.Receipt, error) {
	msg, err := Compose(ch.s.from, ch.s.to, ch.s.domain, r, time.Now())
	if err != nil {
		return "", err
	}
	rcpts, err := recipients(ch.s.to, r.Owner)
	if err != nil {
		return "", err
	}
	return "", ch.session(ctx, "notification", func(c *smtp.Client) error {
		return transaction(c, ch.s.from.Address, rcpts, msg)
	})
}

// Check connects, starts TLS as configured, authenticates when a username
// is set, and quits: nothing is sent.
func (ch *Channel) Check(ctx context.Context) error {
	return ch.session(ctx, "", nil)
}

// recipients are the addresses of to and the owner's, each once.
func recipients(to []*mail.Address, owner *destination.Owner) ([]string, error) {
	out := make([]string, 0, len(to)+1)
	seen := map[string]bool{}
	add := func(a string) {
		if k := strings.ToLower(a); !seen[k] {
			seen[k] = true
			out = append(out, a)
		}
	}
	for _, a := range to {
		add(a.Address)
	}
	if owner != nil && owner.Email != "" {
		a, err := parseAddress(owner.Email)
		if err != nil {
			// The clients file's owners are checked when it is read:
			// this is a defect, said without the address.
			return nil, destination.Errorf(opRcpt, destination.Rejected, "the owner's email is not an ASCII e-mail address")
		}
		add(a.Address)
	}
	return out, nil
}

// The operations an error names.
const (
	opConnect  = "smtp connect"
	opStartTLS = "smtp starttls"
	opAuth     = "smtp auth"
	opMail     = "smtp mail"
	opRcpt     = "smtp rcpt"
	opData     = "smtp data"
	// opSend is the answer to the final dot: the message's acceptance.
	opSend = "smtp send"
)

// session runs one SMTP session: connect, (STARTTLS,) authenticate, then
// f when not nil, then QUIT. Every step is bounded by the destination's
// time-out, and the whole session too. It is reported to the delivery
// log as one call (step, when not empty) whose outcome is the reply code
// that ended it (250 for a message accepted), or timeout, or
// connection_error.
func (ch *Channel) session(ctx context.Context, step string, f func(c *smtp.Client) error) (err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, ch.s.timeout)
	defer cancel()
	defer func() {
		code := 250
		if f == nil {
			code = 221 // QUIT's
		}
		if err != nil {
			code = 0
		}
		if e, ok := destination.AsError(err); ok && e.Status != 0 {
			code = e.Status
		}
		destination.Observe(ctx, destination.Observation{Step: step, StartedAt: start, Duration: time.Since(start),
			Outcome: destination.OutcomeOf(code, cause(err))})
	}()

	addr := net.JoinHostPort(strings.TrimSuffix(ch.s.host, "."), strconv.Itoa(ch.s.port))
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return classify(opConnect, err, false)
	}
	conn := newBoundedConn(raw, ctx)
	defer conn.stop()
	var c *smtp.Client
	switch ch.s.mode {
	case TLSImplicit:
		tc := tls.Client(conn, ch.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			tc.Close()
			return classify(opConnect, err, false)
		}
		c = smtp.NewClient(tc)
	case TLSStartTLS:
		if c, err = smtp.NewClientStartTLS(conn, ch.tls); err != nil {
			return classify(opStartTLS, err, false)
		}
	default:
		c = smtp.NewClient(conn)
	}
	defer c.Close()
	c.CommandTimeout, c.SubmissionTimeout = ch.s.timeout, ch.s.timeout
	if err := c.Hello(ch.s.domain); err != nil {
		op := opConnect
		if ch.s.mode == TLSStartTLS {
			// The handshake runs with the first command after STARTTLS.
			op = opStartTLS
		}
		return classify(op, err, false)
	}
	if ch.s.username != "" {
		if err := ch.auth(c); err != nil {
			return err
		}
	}
	if f != nil {
		if err := f(c); err != nil {
			return err
		}
	}
	// The message is accepted: a failed QUIT changes nothing.
	_ = c.Quit()
	return nil
}

func (ch *Channel) auth(c *smtp.Client) error {
	if ok, _ := c.Extension("AUTH"); !ok {
		return &destination.Error{Op: opAuth, Class: destination.Unauthorized, Code: "auth_unavailable",
			Err: errors.New("the server offers no authentication (AUTH) on this connection")}
	}
	var mech sasl.Client
	switch {
	case c.SupportsAuth(sasl.Plain):
		mech = sasl.NewPlainClient("", ch.s.username, ch.s.password)
	case c.SupportsAuth(sasl.Login):
		mech = sasl.NewLoginClient(ch.s.username, ch.s.password)
	default:
		return &destination.Error{Op: opAuth, Class: destination.Unauthorized, Code: "auth_mechanism",
			Err: errors.New("the server offers neither PLAIN nor LOGIN")}
	}
	if err := c.Auth(mech); err != nil {
		return classify(opAuth, err, false)
	}
	return nil
}

// transaction sends msg from from to every rcpt in one transaction: MAIL,
// RCPT for each (any refusal ends it: a notification goes to all or
// none), DATA, the message, the final dot. The library resends nothing.
func transaction(c *smtp.Client, from string, rcpts []string, msg []byte) error {
	if err := c.Mail(from, nil); err != nil {
		return classify(opMail, err, false)
	}
	for _, to := range rcpts {
		if err := c.Rcpt(to, nil); err != nil {
			return classify(opRcpt, err, false)
		}
	}
	w, err := c.Data()
	if err != nil {
		return classify(opData, err, false)
	}
	if _, err := w.Write(msg); err != nil {
		return classify(opData, err, false)
	}
	// From the final dot on, a failure may follow an accepted message.
	if _, err := w.CloseWithResponse(); err != nil {
		return classify(opSend, err, true)
	}
	return nil
}

// cause is the error an *Error wraps, for OutcomeOf.
func cause(err error) error {
	if e, ok := destination.AsError(err); ok && e.Err != nil {
		return e.Err
	}
	return err
}

// boundedConn is a connection whose deadlines never pass its session's:
// the library sets a deadline per command (CommandTimeout), and clears it
// after, which would otherwise lift the bound of the whole session; a
// cancelled context ends it at once.
type boundedConn struct {
	net.Conn
	mu    sync.Mutex
	limit time.Time
	after func() bool
}

func newBoundedConn(c net.Conn, ctx context.Context) *boundedConn {
	b := &boundedConn{Conn: c}
	b.limit, _ = ctx.Deadline()
	_ = c.SetDeadline(b.limit)
	b.after = context.AfterFunc(ctx, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.limit = time.Unix(1, 0)
		_ = b.Conn.SetDeadline(b.limit)
	})
	return b
}

func (b *boundedConn) bound(t time.Time) time.Time {
	if !b.limit.IsZero() && (t.IsZero() || t.After(b.limit)) {
		return b.limit
	}
	return t
}

func (b *boundedConn) SetDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Conn.SetDeadline(b.bound(t))
}

func (b *boundedConn) SetReadDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Conn.SetReadDeadline(b.bound(t))
}

func (b *boundedConn) SetWriteDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Conn.SetWriteDeadline(b.bound(t))
}

// stop releases the context's hook and closes the connection.
func (b *boundedConn) stop() {
	b.after()
	_ = b.Conn.Close()
}
