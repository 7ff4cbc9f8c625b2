package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// option is one choice of a select: its value and what people read.
type option struct{ Value, Label string }

// The choices of the filters: how far back, failure outcomes.
var (
	ageOptions = []option{
		{"1h", "1 hour"}, {"6h", "6 hours"}, {"24h", "24 hours"}, {"72h", "3 days"}, {"168h", "7 days"}, {"720h", "30 days"},
	}
	outcomeOptions = []string{
		string(response.CodeDownstreamUnavailable), string(response.CodeCRMRejected), string(response.CodeErased),
	}
	// ids are the shapes a client id (API_CLIENTS' or the file's) and an
	// owner's name may have; anything else in a filter is no one's.
	idRE    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	ownerRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
)

// pageSize is how many keys a page of leads shows.
const pageSize = 50

// parseAge reads a filter's duration: one of ageOptions, or empty.
func parseAge(s string) (time.Duration, bool) {
	if s == "" {
		return 0, true
	}
	if !slices.ContainsFunc(ageOptions, func(o option) bool { return o.Value == s }) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}

// leadsQuery is the leads page's filter as the form sends it.
type leadsQuery struct {
	Client, State, Outcome, Owner, Within, Older, After string
}

type leadsData struct {
	Q        leadsQuery
	Clients  []string
	States   []lead.KeyState
	Outcomes []string
	Ages     []option
	Rows     []store.LeadRow
	// Next is the URL of the next page, empty on the last; First that of
	// the first, empty on it.
	Next, First string
}

func (h *handler) handleLeads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lq := leadsQuery{
		Client: q.Get("client"), State: q.Get("state"), Outcome: q.Get("outcome"), Owner: q.Get("owner"),
		Within: q.Get("within"), Older: q.Get("older"), After: q.Get("after"),
	}
	f := store.LeadFilter{ClientID: lq.Client, State: lead.KeyState(lq.State), Outcome: lq.Outcome, Owner: lq.Owner, Limit: pageSize}
	var ok bool
	var bad []string
	if lq.Client != "" && !idRE.MatchString(lq.Client) {
		bad = append(bad, "client")
	}
	if lq.State != "" && !slices.Contains(lead.KeyStates, f.State) {
		bad = append(bad, "state")
	}
	if lq.Outcome != "" && !slices.Contains(outcomeOptions, lq.Outcome) {
		bad = append(bad, "outcome")
	}
	if lq.Owner != "" && !ownerRE.MatchString(lq.Owner) {
		bad = append(bad, "owner")
	}
	if f.Within, ok = parseAge(lq.Within); !ok {
		bad = append(bad, "within")
	}
	if f.OlderThan, ok = parseAge(lq.Older); !ok {
		bad = append(bad, "older")
	}
	if lq.After != "" {
		c, ok := store.ParseLeadCursor(lq.After)
		if !ok {
			bad = append(bad, "after")
		}
		f.After = &c
	}
	if len(bad) > 0 {
		h.fail(w, r, http.StatusBadRequest, "The filter's "+strings.Join(bad, ", ")+" is not one of its choices.")
		return
	}
	page, err := h.op.Leads(r.Context(), f)
	if err != nil {
		h.failStore(w, r, err, "listing the leads")
		return
	}
	d := &leadsData{
		Q: lq, Clients: h.op.ClientIDs(), States: lead.KeyStates, Outcomes: outcomeOptions, Ages: ageOptions, Rows: page.Rows,
	}
	link := func(after string) string {
		v := url.Values{}
		for k, s := range map[string]string{"client": lq.Client, "state": lq.State, "outcome": lq.Outcome, "owner": lq.Owner,
			"within": lq.Within, "older": lq.Older, "after": after} {
			if s != "" {
				v.Set(k, s)
			}
		}
		if len(v) == 0 {
			return Prefix + "leads"
		}
		return Prefix + "leads?" + v.Encode()
	}
	if page.Next != nil {
		d.Next = link(page.Next.String())
	}
	if lq.After != "" {
		d.First = link("")
	}
	h.render(w, r, http.StatusOK, "leads", "Leads", "leads", d)
}

// leadData is a lead's page.
type leadData struct {
	R *operator.LeadReport
	// Enquiry is shown only in answer to "show the enquiry".
	Enquiry *operator.EnquiryReport
	// Done says what an action just did.
	Done string
	// May* say which actions the lead's state allows.
	MayRedrive, MayRelease, MaySettle bool
}

func (h *handler) leadPage(w http.ResponseWriter, r *http.Request, status int, client, key string, enquiry *operator.EnquiryReport, done string) {
	rep, err := h.op.Lead(r.Context(), client, key)
	if err != nil {
		h.failStore(w, r, err, "reading the key")
		return
	}
	d := &leadData{R: rep, Enquiry: enquiry, Done: done}
	erased, superseded := rep.ErasedAt != nil, rep.SupersededBy != nil
	d.MayRedrive = rep.State == lead.KeyFailed && rep.FailureCode != nil && *rep.FailureCode == string(response.CodeDownstreamUnavailable) && !erased && !superseded
	d.MayRelease = rep.State == lead.KeyQuarantined && !erased && !superseded
	d.MaySettle = rep.State == lead.KeyNeedsReconciliation && !erased
	h.render(w, r, status, "lead", "Key "+key, "leads", d)
}

func (h *handler) handleLead(w http.ResponseWriter, r *http.Request) {
	h.leadPage(w, r, http.StatusOK, r.PathValue("client"), r.PathValue("key"), nil, "")
}

// handleEnquiry shows a lead with its enquiry: a POST, so that the look is
// an action (recorded in the audit), never a link that a browser may
// prefetch or keep in its history.
func (h *handler) handleEnquiry(w http.ResponseWriter, r *http.Request) {
	client, key := r.PathValue("client"), r.PathValue("key")
	e, err := h.op.Enquiry(r.Context(), who(r), client, key)
	if err != nil {
		h.failStore(w, r, err, "showing the enquiry")
		return
	}
	h.leadPage(w, r, http.StatusOK, client, key, e, "")
}

func (h *handler) handleSettle(w http.ResponseWriter, r *http.Request) {
	client, key := r.PathValue("client"), r.PathValue("key")
	crmID, notFound := strings.TrimSpace(r.PostForm.Get("crm_id")), r.PostForm.Get("not_found") == "yes"
	if (crmID == "") == !notFound {
		h.fail(w, r, http.StatusBadRequest, "Settle needs the CRM record's id, or “no record”, one of the two: nothing was done.")
		return
	}
	err := h.op.Settle(r.Context(), who(r), client, key, !notFound, crmID)
	var st *operator.ErrState
	if errors.As(err, &st) {
		h.fail(w, r, http.StatusConflict, fmt.Sprintf("The key is %s, not needs_reconciliation: nothing was changed.", st.State))
		return
	}
	if err != nil {
		h.failStore(w, r, err, "the settle")
		return
	}
	done := "Settled: the record was found; the lead resumes at its notification."
	if notFound {
		done = "Settled: no record; the lead resumes at its CRM step."
	}
	h.leadPage(w, r, http.StatusOK, client, key, nil, done)
}

// quarantineData is the quarantine page.
type quarantineData struct {
	Client  string
	Clients []string
	Keys    []store.QuarantinedKey
	// More is set when there are more than the page shows.
	More bool
}

// quarantinePage is how many quarantined keys the page lists, oldest
// first.
const quarantinePage = 200

func (h *handler) handleQuarantine(w http.ResponseWriter, r *http.Request) {
	client := r.URL.Query().Get("client")
	if client != "" && !idRE.MatchString(client) {
		h.fail(w, r, http.StatusBadRequest, "The filter's client is not one of its choices.")
		return
	}
	keys, err := h.op.Quarantined(r.Context(), store.QuarantineFilter{ClientID: client, Limit: quarantinePage + 1})
	if err != nil {
		h.failStore(w, r, err, "listing the quarantine")
		return
	}
	d := &quarantineData{Client: client, Clients: h.op.ClientIDs(), Keys: keys}
	if len(keys) > quarantinePage {
		d.Keys, d.More = keys[:quarantinePage], true
	}
	h.render(w, r, http.StatusOK, "quarantine", "Quarantine", "quarantine", d)
}

// selection is the keys a form names, as client/key values, by client in
// the order first named.
type selection struct {
	Clients []string
	Keys    map[string][]string
	// Values are the form's values, as sent again by a confirmation.
	Values []string
}

// parseSelection reads the keys a form names (values "client/key"). It
// refuses none, more than operator.MaxKeys, or a value that is no key.
func parseSelection(values []string) (*selection, string) {
	switch {
	case len(values) == 0:
		return nil, "No key was selected: nothing was done."
	case len(values) > operator.MaxKeys:
		return nil, fmt.Sprintf("%d keys were selected at once; at most %d: nothing was done. Select fewer.", len(values), operator.MaxKeys)
	}
	s := &selection{Keys: map[string][]string{}}
	for _, v := range values {
		client, key, ok := strings.Cut(v, "/")
		if !ok || !idRE.MatchString(client) || key == "" || len(key) > 255 {
			return nil, "A selected value is not a client's key: nothing was done."
		}
		if _, seen := s.Keys[client]; !seen {
			s.Clients = append(s.Clients, client)
		}
		if !slices.Contains(s.Keys[client], key) {
			s.Keys[client] = append(s.Keys[client], key)
			s.Values = append(s.Values, v)
		}
	}
	return s, ""
}

// doneData is what a release or a redrive did.
type doneData struct {
	Verb    string
	Keys    []store.KeyName
	Skipped []store.Skipped
	Left    int
	// Err says what went wrong midway, after Keys were done.
	Err string
	// Again is the redrive that takes the keys left.
	Again *redriveQuery
}

func (h *handler) handleRelease(w http.ResponseWriter, r *http.Request) {
	sel, msg := parseSelection(r.PostForm["key"])
	if sel == nil {
		h.fail(w, r, http.StatusBadRequest, msg)
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.render(w, r, http.StatusOK, "release_confirm", "Release", "quarantine", sel)
		return
	}
	d := &doneData{Verb: "released"}
	for _, client := range sel.Clients {
		done, err := h.op.Release(r.Context(), who(r), client, sel.Keys[client])
		if err != nil {
			if errors.Is(err, operator.ErrForbidden) {
				h.failStore(w, r, err, "the release")
				return
			}
			h.logger.ErrorContext(r.Context(), "console: release", "error", err.Error())
			d.Err = "The database did not answer in time: the keys of client " + client + " and after were not released. Try them again."
			break
		}
		d.Keys, d.Skipped = append(d.Keys, done.Keys...), append(d.Skipped, done.Skipped...)
	}
	h.render(w, r, http.StatusOK, "done", "Released", "quarantine", d)
}

// redriveQuery is a redrive as its form sends it: one or more keys of a
// client (mode key), or the failed keys of a client (or all) since a time
// (mode outcome).
type redriveQuery struct {
	Mode, Client, Since string
	Keys                []string
}

// Key is the first key named, for the form of one key.
func (q redriveQuery) Key() string {
	if len(q.Keys) == 0 {
		return ""
	}
	return q.Keys[0]
}

type redriveData struct {
	Q       redriveQuery
	Clients []string
	Ages    []option
	// Preview: what the redrive would do (a dry run).
	Preview *store.Redriven
	Count   int
	Max     int
}

func (h *handler) handleRedriveForm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &redriveData{Q: redriveQuery{Client: q.Get("client"), Keys: q["key"], Since: "24h"}, Clients: h.op.ClientIDs(), Ages: ageOptions, Max: operator.MaxKeys}
	h.render(w, r, http.StatusOK, "redrive", "Redrive", "redrive", d)
}

// parseRedrive reads a redrive's form into what operator.Redrive takes.
func parseRedrive(form url.Values) (redriveQuery, *store.RedriveParams, string) {
	q := redriveQuery{Mode: form.Get("mode"), Client: form.Get("client"), Since: form.Get("since")}
	for _, k := range form["key"] {
		if k = strings.TrimSpace(k); k != "" {
			q.Keys = append(q.Keys, k)
		}
	}
	const noSelector = "Choose one key with its client, or the failed keys (downstream_unavailable) of a client since a time: nothing was done."
	if q.Client != "" && !idRE.MatchString(q.Client) {
		return q, nil, "The client is not one of its choices: nothing was done."
	}
	switch q.Mode {
	case "key":
		switch {
		case len(q.Keys) == 0 || q.Client == "":
			return q, nil, noSelector
		case len(q.Keys) > operator.MaxKeys:
			return q, nil, fmt.Sprintf("%d keys were named at once; at most %d: nothing was done.", len(q.Keys), operator.MaxKeys)
		}
		return q, &store.RedriveParams{ClientID: q.Client, Keys: q.Keys}, ""
	case "outcome":
		since, ok := parseAge(q.Since)
		if !ok {
			return q, nil, "The time is not one of its choices: nothing was done."
		}
		return q, &store.RedriveParams{ClientID: q.Client, Outcome: response.CodeDownstreamUnavailable, Since: since, Limit: operator.MaxKeys}, ""
	}
	return q, nil, noSelector
}

func (h *handler) handleRedrive(w http.ResponseWriter, r *http.Request) {
	q, p, msg := parseRedrive(r.PostForm)
	if p == nil {
		h.fail(w, r, http.StatusBadRequest, msg)
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		p.DryRun = true
		dry, err := h.op.Redrive(r.Context(), who(r), p)
		if err != nil {
			h.redriveFailed(w, r, err)
			return
		}
		d := &redriveData{Q: q, Clients: h.op.ClientIDs(), Ages: ageOptions, Preview: dry, Count: len(dry.Keys) + dry.Left, Max: operator.MaxKeys}
		h.render(w, r, http.StatusOK, "redrive", "Redrive", "redrive", d)
		return
	}
	done, err := h.op.Redrive(r.Context(), who(r), p)
	if err != nil {
		h.redriveFailed(w, r, err)
		return
	}
	d := &doneData{Verb: "redriven", Keys: done.Keys, Skipped: done.Skipped, Left: done.Left}
	if done.Left > 0 {
		d.Again = &q
	}
	h.render(w, r, http.StatusOK, "done", "Redriven", "redrive", d)
}

func (h *handler) redriveFailed(w http.ResponseWriter, r *http.Request, err error) {
	var tooMany *operator.TooManyKeysError
	switch {
	case errors.Is(err, operator.ErrBadRedrive):
		h.fail(w, r, http.StatusBadRequest, err.Error()+": nothing was done.")
	case errors.As(err, &tooMany):
		h.fail(w, r, http.StatusBadRequest, tooMany.Error())
	default:
		h.failStore(w, r, err, "the redrive")
	}
}

func (h *handler) handleDestinations(w http.ResponseWriter, r *http.Request) {
	ds, err := h.op.Destinations(r.Context())
	if err != nil {
		h.failStore(w, r, err, "reading the destinations")
		return
	}
	h.render(w, r, http.StatusOK, "destinations", "Destinations", "destinations", ds)
}

// auditData is the audit page.
type auditData struct {
	Since   string
	Ages    []option
	Entries []store.AuditEntry
	// Older is the URL of the next, older page; empty on the last.
	Older string
}

// auditPage is how many entries the audit page shows.
const auditPage = 100

func (h *handler) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, ok := parseAge(q.Get("since"))
	before, err := strconv.ParseInt(q.Get("before"), 10, 64)
	if q.Get("before") == "" {
		before, err = 0, nil
	}
	if !ok || err != nil || before < 0 {
		h.fail(w, r, http.StatusBadRequest, "The filter is not one of its choices.")
		return
	}
	entries, err := h.op.Audit(r.Context(), store.AuditFilter{Since: since, Before: before, Limit: auditPage + 1})
	if err != nil {
		h.failStore(w, r, err, "reading the audit")
		return
	}
	d := &auditData{Since: q.Get("since"), Ages: ageOptions, Entries: entries}
	if len(entries) > auditPage {
		d.Entries = entries[:auditPage]
		v := url.Values{"before": {strconv.FormatInt(d.Entries[auditPage-1].ID, 10)}}
		if d.Since != "" {
			v.Set("since", d.Since)
		}
		d.Older = Prefix + "audit?" + v.Encode()
	}
	h.render(w, r, http.StatusOK, "audit", "Audit", "audit", d)
}
