// Package teamsfake stands in for a Teams workflow whose trigger is "When a
// Teams webhook request is received" and whose action posts each card of
// the request to a channel (the template "Post to a channel when a webhook
// request is received"), as the teams destination kind calls it: an
// http.Handler (Server) at the trigger's paths, in both of the forms Power
// Automate hands out:
//
//	POST /workflows/{id}/triggers/manual/paths/invoke?api-version=…&sp=…&sv=1.0&sig=…
//	POST /powerautomate/automations/direct/workflows/{id}/triggers/manual/paths/invoke?…&sig=…
//
// It answers as the trigger does, in Azure Logic Apps' error shape
// {"error": {"code", "message"}}: 202 with an empty body for a request it
// takes; 401 DirectApiAuthorizationRequired without a sig, 401
// DirectApiInvalidAuthorizationSignature for a wrong one (or while it
// refuses credentials, as for a URL regenerated since); 404
// WorkflowNotFound for another workflow; 400 WorkflowTriggerIsNotEnabled
// while the workflow is turned off, suspended or deleted; 400
// InvalidRequestContent for a body that is not JSON; 400
// TriggerInputSchemaMismatch for one that is not a message with
// attachments.
//
// The real trigger takes any message and answers 202 before its action
// posts the cards; a card Teams will not post fails the flow's run, out of
// the caller's sight. The stand-in checks at once what that action would
// refuse, so that a test sees a driver that sends it: an attachment that is
// not an Adaptive Card, a card whose type is not AdaptiveCard, whose
// version is below 1.4 or above 1.6, whose body is empty or holds an
// element of an unknown type or without its required members (400
// InvalidAdaptiveCard, the stand-in's own code), and a message over Teams'
// 28 KB (413 RequestEntityTooLarge).
//
// It keeps each card it took (Messages, Message) with its text as Teams
// shows it: every TextBlock and fact rendered as CommonMark with GitHub's
// extensions (tables, strikethrough, task lists, and the linkify of bare
// URLs, www. addresses and e-mail addresses: more than Teams' subset), and
// what that rendering made of links and formatting, so that a test sees
// any visitor text that would become markup.
//
// It misbehaves on demand through an internal/standin Kit, one target
// (TargetTrigger), and is driven over HTTP under /_standin (script, chaos,
// reset, credentials, workflow, state). It logs method, route, status and
// fault: never a query, which holds the sig.
package teamsfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/yuin/goldmark"
	gast "github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

	"github.com/leadintake/leadintake/internal/standin"
)

// TargetTrigger is the stand-in's one target: the trigger's POST.
const TargetTrigger = "trigger"

// Targets are the stand-in's targets.
var Targets = []string{TargetTrigger}

// Defaults of Options.
const (
	DefaultWorkflow = "5f3a9c2e8b7d4e61a0c4d2b9e8f7a6c1"
	DefaultSig      = "teams-fake-signature-0123456789abcdef"
	// DefaultMaxBytes is Teams' bound on a message: about 28 KB.
	DefaultMaxBytes = 28 << 10
)

// The workflow's states; only Enabled takes requests.
const (
	StateEnabled   = "Enabled"
	StateDisabled  = "Disabled"
	StateSuspended = "Suspended"
	StateDeleted   = "Deleted"
)

// Options configure a Server. The zero Options accept DefaultWorkflow and
// DefaultSig, and bound a message at DefaultMaxBytes.
type Options struct {
	// Workflow is the workflow's id, in the trigger's path.
	Workflow string
	// Sig is the signature the trigger's URL carries.
	Sig string
	// MaxBytes bounds a request's body.
	MaxBytes int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger logs each request (method, route, status, fault); none when
	// nil.
	Logger *slog.Logger
}

// Message is a card the stand-in took.
type Message struct {
	// Run is the id of the flow's run, as the trigger's
	// x-ms-workflow-run-id header gives it.
	Run string
	// Card is the attachment's content, as sent.
	Card json.RawMessage
	// Text is the card's text as Teams shows it, one line per TextBlock
	// and per fact ("title: value").
	Text string
	// Links are the links the card's Markdown makes (their targets),
	// autolinks of bare URLs and addresses included.
	Links []string
	// Markup names the formatting the card's Markdown makes beyond plain
	// text (strong, emphasis, code, list, heading, quote, image, html,
	// table, strikethrough...), and date-function for a {{DATE()}} or
	// {{TIME()}} that a client would replace.
	Markup []string
	// Actions are the URLs the card's actions open.
	Actions []string
	At      time.Time
}

// State is what the stand-in holds, without personal data.
type State struct {
	Messages            int            `json:"messages"`
	Refused             int            `json:"refused"`
	Requests            map[string]int `json:"requests"`
	RefusingCredentials bool           `json:"refusing_credentials"`
	WorkflowState       string         `json:"workflow_state"`
}

// Server is the stand-in. Its methods are safe for concurrent use.
type Server struct {
	kit  *standin.Kit
	opts Options
	mux  *http.ServeMux

	mu       sync.Mutex
	messages []Message
	refused  int
	requests map[string]int
	refuse   bool
	state    string
}

// New returns a Server.
func New(o *Options) *Server {
	s := &Server{kit: standin.New(Targets...)}
	if o != nil {
		s.opts = *o
	}
	if s.opts.Workflow == "" {
		s.opts.Workflow = DefaultWorkflow
	}
	if s.opts.Sig == "" {
		s.opts.Sig = DefaultSig
	}
	if s.opts.MaxBytes <= 0 {
		s.opts.MaxBytes = DefaultMaxBytes
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	s.resetState()

	mux := http.NewServeMux()
	const invoke = "/workflows/{id}/triggers/{trigger}/paths/invoke"
	mux.HandleFunc("POST "+invoke, s.trigger)
	mux.HandleFunc("POST /powerautomate/automations/direct"+invoke, s.trigger)
	s.kit.Routes(mux, "/_standin", s.resetState)
	mux.HandleFunc("POST /_standin/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Refuse bool `json:"refuse"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		s.SetRefuseCredentials(req.Refuse)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_standin/workflow", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			State string `json:"state"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		if err := s.SetWorkflowState(req.State); err != nil {
			standin.ControlError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_standin/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.State())
	})
	s.mux = mux
	return s
}

// ServeHTTP serves the trigger and the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// URL is the trigger's URL at base (the stand-in's origin), as Teams shows
// it for the workflow: what the destination's webhook_url is.
func (s *Server) URL(base string) string {
	return strings.TrimRight(base, "/") + "/workflows/" + s.opts.Workflow +
		"/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + s.opts.Sig
}

// Kit is the stand-in's misbehaviour: Script and SetChaos per target.
func (s *Server) Kit() *standin.Kit { return s.kit }

// Script queues faults for target's next requests.
func (s *Server) Script(target string, faults ...standin.Fault) { s.kit.Script(target, faults...) }

// Close ends hung requests (see standin.Kit.Close).
func (s *Server) Close() { s.kit.Close() }

// SetRefuseCredentials makes every call refused as one whose sig is no
// longer the workflow's (401), or accepted again.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// SetWorkflowState turns the workflow on (StateEnabled) or off
// (StateDisabled), or makes it suspended or deleted: all but Enabled refuse
// every call with 400 WorkflowTriggerIsNotEnabled.
func (s *Server) SetWorkflowState(state string) error {
	if !slices.Contains([]string{StateEnabled, StateDisabled, StateSuspended, StateDeleted}, state) {
		return fmt.Errorf("unknown workflow state %q (want Enabled, Disabled, Suspended or Deleted)", state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = state
	return nil
}

// Reset forgets the messages, the counts, the faults, the refusal and the
// workflow's state.
func (s *Server) Reset() {
	s.kit.Reset()
	s.resetState()
}

func (s *Server) resetState() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages, s.refused, s.requests = nil, 0, map[string]int{}
	s.refuse, s.state = false, StateEnabled
}

// Messages returns copies of the messages taken, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	for i, m := range s.messages {
		out[i] = m
		out[i].Links, out[i].Markup, out[i].Actions = slices.Clone(m.Links), slices.Clone(m.Markup), slices.Clone(m.Actions)
	}
	return out
}

// For returns the messages whose text names ref (a lead's reference, or
// its id), oldest first.
func (s *Server) For(ref string) []Message {
	var out []Message
	for _, m := range s.Messages() {
		if mentions(m.Text, ref) {
			out = append(out, m)
		}
	}
	return out
}

// mentions reports whether text holds ref as a word of its own: not the
// start of a longer reference.
func mentions(text, ref string) bool {
	for i := 0; ref != ""; {
		j := strings.Index(text[i:], ref)
		if j < 0 {
			return false
		}
		end := i + j + len(ref)
		if end == len(text) || !isWordByte(text[end]) {
			return true
		}
		i = end
	}
	return false
}

func isWordByte(b byte) bool {
	return b == '_' || b == '-' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// State returns the counts.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Messages: len(s.messages), Refused: s.refused, Requests: maps.Clone(s.requests),
		RefusingCredentials: s.refuse, WorkflowState: s.state}
}

// ErrorBody is a Logic Apps error body.
func ErrorBody(code, message string) string {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	return string(b)
}

// RateLimitFault is the workflow's answer to too many calls: 429 with
// Retry-After and WorkflowRequestsThrottled.
func RateLimitFault() standin.Fault {
	return standin.Fault{Status: http.StatusTooManyRequests, RetryAfter: "2",
		Body: ErrorBody("WorkflowRequestsThrottled", "Rate limit is exceeded. Try again in 2 seconds.")}
}

// ServerErrorFault is a failure of the service: 502 with Logic Apps' body.
func ServerErrorFault() standin.Fault {
	return standin.Fault{Status: http.StatusBadGateway,
		Body: ErrorBody("BadGateway", "The service is temporarily unavailable. Please try again later.")}
}

// RejectFault is the trigger's refusal of a body that is not what it takes.
func RejectFault() standin.Fault {
	return standin.Fault{Status: http.StatusBadRequest,
		Body: ErrorBody("TriggerInputSchemaMismatch", "The input body for trigger 'manual' of type 'Request' did not match its schema definition.")}
}

// answerError is an error answer in Logic Apps' shape.
func answerError(status int, code, message string) standin.Answer {
	a := standin.Answer{Status: status, Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}}
	a.Body = []byte(ErrorBody(code, message))
	return a
}

func (s *Server) trigger(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[TargetTrigger]++
	s.mu.Unlock()
	f := s.kit.Next(TargetTrigger)
	goOn, status, outcome := s.kit.Before(w, r, f)
	if goOn {
		a := s.handle(r)
		s.kit.After(w, r, f, a)
		status, outcome = a.Status, f.String()
	}
	if s.opts.Logger != nil {
		// The route, never the path or query: the query holds the sig.
		s.opts.Logger.Info("teams fake", "method", r.Method, "route", r.Pattern, "status", status, "fault", outcome)
	}
}

// handle checks and applies one request as the trigger and its action do.
func (s *Server) handle(r *http.Request) standin.Answer {
	a := s.check(r)
	if a.Status != http.StatusAccepted {
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
	}
	return a
}

func (s *Server) check(r *http.Request) standin.Answer {
	q := r.URL.Query()
	s.mu.Lock()
	refuse, state := s.refuse, s.state
	s.mu.Unlock()
	id := r.PathValue("id")
	switch {
	case q.Get("sig") == "":
		return answerError(http.StatusUnauthorized, "DirectApiAuthorizationRequired", "The request must be authenticated only by Shared Access scheme.")
	case id != s.opts.Workflow || r.PathValue("trigger") != "manual":
		return answerError(http.StatusNotFound, "WorkflowNotFound", "The workflow '"+id+"' could not be found.")
	case refuse || q.Get("sig") != s.opts.Sig:
		return answerError(http.StatusUnauthorized, "DirectApiInvalidAuthorizationSignature", "The provided authorization signature is not valid.")
	case q.Get("api-version") == "":
		return answerError(http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
	case state != StateEnabled:
		return answerError(http.StatusBadRequest, "WorkflowTriggerIsNotEnabled",
			"Could not execute workflow '"+id+"' trigger 'manual' with state '"+state+"': trigger is not enabled.")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(s.opts.MaxBytes)+1))
	switch {
	case err != nil:
		return answerError(http.StatusBadRequest, "InvalidRequestContent", "The request content could not be read.")
	case len(body) > s.opts.MaxBytes:
		return answerError(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "Request Entity too large")
	}
	var msg struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string          `json:"contentType"`
			Content     json.RawMessage `json:"content"`
		} `json:"attachments"`
	}
	if !json.Valid(body) || json.Unmarshal(body, &msg) != nil {
		return answerError(http.StatusBadRequest, "InvalidRequestContent", "The request content is not valid JSON.")
	}
	if msg.Type != "message" || len(msg.Attachments) == 0 {
		return answerError(http.StatusBadRequest, "TriggerInputSchemaMismatch",
			"The input body for trigger 'manual' of type 'Request' did not match its schema definition: want a message with attachments.")
	}
	var taken []Message
	for i, att := range msg.Attachments {
		if att.ContentType != "application/vnd.microsoft.card.adaptive" {
			return answerError(http.StatusBadRequest, "InvalidAdaptiveCard", fmt.Sprintf("attachments[%d]: contentType is not an Adaptive Card's", i))
		}
		m, err := readCard(att.Content)
		if err != nil {
			return answerError(http.StatusBadRequest, "InvalidAdaptiveCard", fmt.Sprintf("attachments[%d]: %v", i, err))
		}
		m.Run, m.At = runID(), s.opts.Now()
		taken = append(taken, m)
	}
	s.mu.Lock()
	s.messages = append(s.messages, taken...)
	s.mu.Unlock()
	return standin.Answer{Status: http.StatusAccepted, Header: http.Header{
		"x-ms-workflow-run-id":      {taken[0].Run},
		"x-ms-workflow-id":          {s.opts.Workflow},
		"x-ms-correlation-id":       {uuid.NewString()},
		"x-ms-tracking-id":          {uuid.NewString()},
		"x-ms-trigger-history-name": {taken[0].Run},
	}}
}

func runID() string {
	return "0858" + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", ""))[:24] + "CU00"
}

// element is a card element as the stand-in reads it.
type element struct {
	Type    string    `json:"type"`
	Text    *string   `json:"text"`
	Facts   []fact    `json:"facts"`
	Items   []element `json:"items"`
	Columns []element `json:"columns"`
	Inlines []inline  `json:"inlines"`
	URL     string    `json:"url"`
	Actions []action  `json:"actions"`
	Select  *action   `json:"selectAction"`
}

type fact struct {
	Title *string `json:"title"`
	Value *string `json:"value"`
}

type inline struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type action struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

// knownElements are the body elements of Adaptive Cards up to 1.6 that
// Teams renders.
var knownElements = map[string]bool{
	"TextBlock": true, "RichTextBlock": true, "FactSet": true, "Container": true, "ColumnSet": true, "Column": true,
	"Image": true, "ImageSet": true, "ActionSet": true, "Table": true, "Media": true,
	"Input.Text": true, "Input.Number": true, "Input.Date": true, "Input.Time": true, "Input.Toggle": true, "Input.ChoiceSet": true,
}

var knownActions = map[string]bool{
	"Action.OpenUrl": true, "Action.Submit": true, "Action.ShowCard": true, "Action.ToggleVisibility": true, "Action.Execute": true,
}

var versionRE = regexp.MustCompile(`^1\.([0-9])$`)

// readCard checks an Adaptive Card as Teams' post would and returns what
// Teams would show of it.
func readCard(raw json.RawMessage) (Message, error) {
	var card struct {
		Type    string    `json:"type"`
		Version string    `json:"version"`
		Body    []element `json:"body"`
		Actions []action  `json:"actions"`
		Select  *action   `json:"selectAction"`
	}
	if err := json.Unmarshal(raw, &card); err != nil {
		return Message{}, fmt.Errorf("content is not a card object")
	}
	m := Message{Card: slices.Clone(raw)}
	v := versionRE.FindStringSubmatch(card.Version)
	switch {
	case card.Type != "AdaptiveCard":
		return m, fmt.Errorf("type %q is not AdaptiveCard", card.Type)
	case v == nil:
		return m, fmt.Errorf("version %q is not 1.N", card.Version)
	case v[1] < "4" || v[1] > "6":
		return m, fmt.Errorf("version %s: Teams' Workflows take 1.4 to 1.6", card.Version)
	case len(card.Body) == 0:
		return m, fmt.Errorf("empty body")
	}
	var lines []string
	var walk func(path string, es []element) error
	walk = func(path string, es []element) error {
		for i, e := range es {
			at := path + "[" + strconv.Itoa(i) + "]"
			if !knownElements[e.Type] {
				return fmt.Errorf("%s: unknown element type %q", at, e.Type)
			}
			switch e.Type {
			case "TextBlock":
				if e.Text == nil {
					return fmt.Errorf("%s: TextBlock without text", at)
				}
				lines = append(lines, m.render(*e.Text))
			case "FactSet":
				if len(e.Facts) == 0 {
					return fmt.Errorf("%s: FactSet without facts", at)
				}
				for j, f := range e.Facts {
					if f.Title == nil || f.Value == nil {
						return fmt.Errorf("%s.facts[%d]: a fact needs title and value", at, j)
					}
					lines = append(lines, m.render(*f.Title)+": "+m.render(*f.Value))
				}
			case "RichTextBlock":
				// TextRuns are not Markdown.
				var b strings.Builder
				for _, in := range e.Inlines {
					b.WriteString(in.Text)
				}
				lines = append(lines, b.String())
			case "Container", "Column":
				if err := walk(at+".items", e.Items); err != nil {
					return err
				}
			case "ColumnSet":
				if err := walk(at+".columns", e.Columns); err != nil {
					return err
				}
			case "Image":
				m.Markup = append(m.Markup, "image")
			}
			for _, a := range append(e.Actions, deref(e.Select)...) {
				if err := m.action(at, a); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("body", card.Body); err != nil {
		return m, err
	}
	for _, a := range append(card.Actions, deref(card.Select)...) {
		if err := m.action("actions", a); err != nil {
			return m, err
		}
	}
	m.Text = strings.Join(lines, "\n")
	return m, nil
}

func deref(a *action) []action {
	if a == nil {
		return nil
	}
	return []action{*a}
}

func (m *Message) action(at string, a action) error {
	if !knownActions[a.Type] {
		return fmt.Errorf("%s: unknown action type %q", at, a.Type)
	}
	if a.Type == "Action.OpenUrl" {
		m.Actions = append(m.Actions, a.URL)
	}
	return nil
}

// markdown is CommonMark with GitHub's extensions: a superset of the
// Markdown Teams renders in a card, linkify included, so that what is
// literal here is literal in Teams.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

var (
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	functionRE = regexp.MustCompile(`\{\{(DATE|TIME)\(`)
)

// render returns src, a card's Markdown, as plain text, and notes the
// links and the formatting it makes.
func (m *Message) render(src string) string {
	if functionRE.MatchString(src) {
		m.Markup = append(m.Markup, "date-function")
	}
	source := []byte(src)
	doc := markdown.Parser().Parse(text.NewReader(source))
	gast.Walk(doc, func(n gast.Node, entering bool) (gast.WalkStatus, error) {
		if !entering {
			return gast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *gast.Link:
			m.Links = append(m.Links, string(n.Destination))
		case *gast.AutoLink:
			m.Links = append(m.Links, string(n.URL(source)))
		case *gast.Image:
			m.Links = append(m.Links, string(n.Destination))
			m.Markup = append(m.Markup, "image")
		case *gast.Emphasis:
			m.Markup = append(m.Markup, map[int]string{1: "emphasis", 2: "strong"}[n.Level])
		case *gast.CodeSpan, *gast.CodeBlock, *gast.FencedCodeBlock:
			m.Markup = append(m.Markup, "code")
		case *gast.Heading:
			m.Markup = append(m.Markup, "heading")
		case *gast.List:
			m.Markup = append(m.Markup, "list")
		case *gast.Blockquote:
			m.Markup = append(m.Markup, "quote")
		case *gast.ThematicBreak:
			m.Markup = append(m.Markup, "rule")
		case *gast.HTMLBlock, *gast.RawHTML:
			m.Markup = append(m.Markup, "html")
		case *extast.Strikethrough:
			m.Markup = append(m.Markup, "strikethrough")
		case *extast.Table:
			m.Markup = append(m.Markup, "table")
		case *extast.TaskCheckBox:
			m.Markup = append(m.Markup, "task")
		}
		return gast.WalkContinue, nil
	})
	var out bytes.Buffer
	if err := markdown.Renderer().Render(&out, source, doc); err != nil {
		return src
	}
	plain := strings.ReplaceAll(out.String(), "</p>\n<p>", "\n")
	return strings.TrimSpace(html.UnescapeString(tagRE.ReplaceAllString(plain, "")))
}
