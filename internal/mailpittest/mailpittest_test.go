package mailpittest_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func message(id string) string {
	return "From: <a@example.com>\r\nTo: <b@example.com>\r\nMessage-ID: <" + id + ">\r\nSubject: test\r\n\r\nhello\r\n"
}

// send sends one message through s's proxy, plain SMTP with its
// credentials, and returns the answer to the final dot.
func send(t *testing.T, s *mailpittest.Server, id, user, password string) error {
	t.Helper()
	c, err := smtp.Dial(net.JoinHostPort(s.Host, fmt.Sprint(s.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if user != "" {
		if err := c.Auth(sasl.NewPlainClient("", user, password)); err != nil {
			return err
		}
	}
	return c.SendMail("a@example.com", []string{"b@example.com"}, strings.NewReader(message(id)))
}

func TestProxyLosesTheAnswerAfterDelivery(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{Auth: true})
	s.LoseAnswers(1)
	err := send(t, s, "one@example.com", mailpittest.User, mailpittest.Password)
	var se *smtp.SMTPError
	if err == nil || errors.As(err, &se) {
		t.Fatalf("the answer to the dot came through: %v", err)
	}
	// The message was delivered, and the next one is answered.
	if err := send(t, s, "one@example.com", mailpittest.User, mailpittest.Password); err != nil {
		t.Fatalf("the repeat: %v", err)
	}
	if n, err := s.Count("one@example.com"); err != nil || n != 2 {
		t.Errorf("%d deliveries (%v), want 2: Mailpit keeps repeats of a Message-ID", n, err)
	}
	if got := s.Proxy().Lost(); got != 1 {
		t.Errorf("%d answers lost, want 1", got)
	}
}

// Lost answers spread: gap answers through before each lost one, the
// messages delivered all the same.
func TestProxyLosesEveryOtherAnswer(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{})
	s.LoseAnswersEvery(2, 1)
	var lost []int
	for i := range 6 {
		if err := send(t, s, fmt.Sprintf("m%d@example.com", i), "", ""); err != nil {
			lost = append(lost, i)
		}
	}
	if fmt.Sprint(lost) != "[1 3]" {
		t.Errorf("the answers of messages %v were lost, want [1 3]", lost)
	}
	if ms, err := s.Messages(); err != nil || len(ms) != 6 || s.Proxy().Lost() != 2 {
		t.Errorf("%d messages delivered (%v), %d answers lost; want 6 and 2", len(ms), err, s.Proxy().Lost())
	}
}

func TestMailpitRefuses(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{Auth: true})
	var se *smtp.SMTPError
	if err := send(t, s, "wrong@example.com", mailpittest.User, "wrong"); !errors.As(err, &se) || se.Code != 535 {
		t.Errorf("a wrong password: %v, want 535", err)
	}
	if err := send(t, s, "none@example.com", "", ""); !errors.As(err, &se) || se.Code != 530 {
		t.Errorf("no credentials: %v, want 530", err)
	}
	if err := s.Chaos(mailpittest.Recipient, 552); err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, "chaos@example.com", mailpittest.User, mailpittest.Password); !errors.As(err, &se) || se.Code != 552 {
		t.Errorf("chaos: %v, want 552", err)
	}
	if err := s.Chaos(mailpittest.Recipient, 0); err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, "ok@example.com", mailpittest.User, mailpittest.Password); err != nil {
		t.Errorf("after chaos: %v", err)
	}
	ms, err := s.Messages()
	if err != nil || len(ms) != 1 || ms[0].MessageID != "ok@example.com" {
		t.Errorf("messages %+v (%v), want the one accepted", ms, err)
	}

	starttls := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.StartTLS})
	if err := send(t, starttls, "clear@example.com", "", ""); !errors.As(err, &se) || se.Code/100 != 5 {
		t.Errorf("a message in clear where STARTTLS is required: %v", err)
	}
}
