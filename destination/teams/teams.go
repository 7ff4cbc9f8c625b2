package teams

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "teams"

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyChannel},
	Members: []destination.Member{
		// The workflow's URL is the credential: its sig= query signs it.
		{Name: "webhook_url", Required: true, Secret: true},
	},
	Validate:   validate,
	NewChannel: func(c *destination.Config) (destination.Channel, error) { return NewChannel(c) },
}

// validate checks the members; its errors name the member, never its value.
func validate(c *destination.Config) error {
	raw := c.Value("webhook_url")
	if err := destination.CheckHTTPURL("webhook_url", raw, false); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("webhook_url must be an absolute https URL")
	}
	host := strings.ToLower(u.Hostname())
	switch {
	case u.Scheme != "https":
		return errors.New("webhook_url must be an https URL (the workflow's trigger URL, as Teams shows it)")
	case strings.HasSuffix(host, ".webhook.office.com") || strings.HasPrefix(host, "outlook.office") && strings.HasPrefix(u.Path, "/webhook"):
		return errors.New("webhook_url is an Office 365 connector's, which Teams retired: create a workflow from the template Post to a channel when a webhook request is received and use its URL")
	case strings.ContainsAny(raw, " \t\r\n"):
		return errors.New("webhook_url must be one line without spaces")
	case u.Query().Get("sig") == "":
		return errors.New("webhook_url has no sig parameter: copy the workflow's whole URL, with Who can trigger the flow set to Anyone")
	case u.User != nil || u.Fragment != "":
		return errors.New("webhook_url must have no user-info or fragment")
	}
	if c.BaseURL != "" {
		if err := destination.CheckHTTPURL("base_url", c.BaseURL, true); err != nil {
			return err
		}
	}
	if len(c.Map) > 0 {
		return errors.New("map: the teams kind announces leads; map is for CRM kinds")
	}
	return nil
}

// Channel is a Teams channel reached through a workflow's webhook trigger.
type Channel struct {
	http *http.Client
	// url is the trigger's URL, a secret: never logged, never in an error.
	url string
}

// NewChannel returns the channel c configures: it posts to webhook_url, or,
// with base_url, to base_url followed by webhook_url's path and query.
func NewChannel(c *destination.Config) (*Channel, error) {
	u, err := url.Parse(c.Value("webhook_url"))
	if err != nil || u.Host == "" {
		return nil, errors.New("webhook_url must be an absolute https URL")
	}
	target := c.Base(u.Scheme+"://"+u.Host) + u.EscapedPath()
	if u.RawQuery != "" {
		target += "?" + u.RawQuery
	}
	return &Channel{http: destination.NewHTTPClient(Kind, c.Timeout), url: target}, nil
}

// Capabilities: none. The trigger takes no idempotency key and answers 202
// before the card is posted, and the kind has no way to read the channel
// back: after a lost answer it posts again (at least once), and an
// amendment is a card of its own.
func (ch *Channel) Capabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{}
}

// Send posts r's card to the workflow. 200 and 202 are acceptance; see
// Classify for the rest.
func (ch *Channel) Send(ctx context.Context, r *destination.Record, _ destination.Receipt) (destination.Receipt, error) {
	body, err := encode(MessageOf(r))
	if err == nil && len(body) > MaxMessageBytes {
		// Not reached with the fields' bounds; should they change, the
		// lead's message is what gives way.
		body, err = encode(messageOf(r, false))
	}
	switch {
	case err != nil:
		return "", &destination.Error{Op: opSend, Class: destination.Rejected, Err: errors.New("encode the card")}
	case len(body) > MaxMessageBytes:
		return "", &destination.Error{Op: opSend, Class: destination.Rejected, Code: "RequestEntityTooLarge", Err: errors.New("the card is over its bound")}
	}
	req := &destination.Request{Op: opSend, Step: "notification", Method: http.MethodPost, URL: ch.url,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body, NoResend: true}
	resp, err := destination.Do(ctx, ch.http, req)
	if err != nil {
		return "", err
	}
	if err := Classify(resp, time.Now()); err != nil {
		return "", err
	}
	return "", nil
}

// Find is not a capability of the kind.
func (ch *Channel) Find(context.Context, *destination.Record, time.Time) (destination.Receipt, bool, error) {
	return "", false, nil
}
