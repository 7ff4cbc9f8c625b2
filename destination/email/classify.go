package email

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/emersion/go-smtp"

	"github.com/leadintake/leadintake/destination"
)

// classify turns a failed step of a session into the lead's terms.
// afterDot: the message's final dot was sent, so that anything but a
// reply may follow an accepted message.
//
// A reply (RFC 5321 4.2.1; RFC 4954 6 for AUTH):
//   - 530 (authentication required), 534 (mechanism too weak), 535
//     (credentials invalid), 538 (encryption required for the mechanism),
//     and any other 5xx to AUTH: refused credentials, the destination's
//     state, not the lead's.
//   - 421 (service not available, closing the channel): transient, and it
//     holds every lead's calls for Pause.
//   - any other 4xx: transient, the lead waits Pause.
//   - any other 5xx: rejected: the channel is given up for the lead.
//   - anything else where a 2xx or 3xx was due: transient, uncertain
//     after the dot.
//
// No reply: a failure to connect is transient and certain; a time-out or
// a broken connection later is transient, uncertain after the dot. A
// server certificate that does not verify, or a server that does not offer
// the STARTTLS it is configured for, is refused credentials (the server
// could not be authenticated: every lead waits for it to be put right)
// with Code tls_certificate or starttls_unavailable.
//
// The error shows the reply code and the enhanced status code, never the
// reply's text, which may quote an address.
func classify(op string, err error, afterDot bool) *destination.Error {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		e := &destination.Error{Op: op, Status: se.Code, Code: enhanced(se)}
		switch {
		case se.Code == 530 || se.Code == 534 || se.Code == 535 || se.Code == 538 ||
			op == opAuth && se.Code >= 500 && se.Code < 600:
			e.Class = destination.Unauthorized
		case se.Code == 421:
			e.Class, e.RetryAfter, e.HoldAll = destination.Transient, Pause, true
		case se.Code >= 400 && se.Code < 500:
			e.Class, e.RetryAfter = destination.Transient, Pause
		case se.Code >= 500 && se.Code < 600:
			e.Class = destination.Rejected
		default:
			e.Class, e.Uncertain = destination.Transient, afterDot
			e.Err = errors.New("unexpected reply")
		}
		return e
	}
	var (
		unknown   x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verifying *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verifying):
		return &destination.Error{Op: op, Class: destination.Unauthorized, Code: "tls_certificate",
			Err: fmt.Errorf("the server's certificate does not verify: %w", err)}
	case op == opStartTLS && strings.Contains(err.Error(), "doesn't support STARTTLS"):
		// go-smtp's own words for a server whose EHLO lists no STARTTLS.
		return &destination.Error{Op: op, Class: destination.Unauthorized, Code: "starttls_unavailable",
			Err: errors.New("the server does not offer STARTTLS")}
	case op == opConnect && !afterDot && dialFailed(err):
		return destination.TransportError(op, err)
	}
	e := &destination.Error{Op: op, Class: destination.Transient, Uncertain: afterDot, Err: err}
	if destination.Timeout(err) {
		e.Err = fmt.Errorf("no reply within the time-out: %w", err)
	}
	return e
}

// dialFailed reports whether err is a failure to open the connection.
func dialFailed(err error) bool {
	e := destination.TransportError("", err)
	return !e.Uncertain
}

// enhanced is the reply's enhanced status code (RFC 3463), "" for none.
func enhanced(se *smtp.SMTPError) string {
	c := se.EnhancedCode
	if c == (smtp.EnhancedCode{}) || c == smtp.NoEnhancedCode {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", c[0], c[1], c[2])
}
