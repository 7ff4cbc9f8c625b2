package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var hashKey = lead.HashKey("operator-test-pii-hash-key-0123456789")

const clientsFile = `
destinations:
  - name: acme-hook
    kind: http
    url: https://hooks.acme.example/leads
clients:
  - id: a
    notify: [acme-hook]
  - id: b
`

type bundle struct {
	op   *operator.Operator
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	_, pool := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := callers.ParseFile([]byte(clientsFile))
	if err != nil {
		t.Fatal(err)
	}
	holder := callers.NewHolder(set)
	st := store.New(pool)
	st.UseJobs(jobs.NewQueue(client, holder))
	return &bundle{
		op:   &operator.Operator{Store: st, River: client, HashKey: hashKey, Callers: holder, KeyRetention: time.Hour},
		pool: pool,
	}
}

// claim claims a new key of client a for body, quarantined for reasons
// when there are some.
func (b *bundle) claim(t *testing.T, body string, reasons ...string) string {
	t.Helper()
	payload, err := lead.Decode([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	key := testkit.NewKey()
	p := &store.ClaimParams{
		ClientID: "a", Key: key, ExternalRef: "ref-" + key, Payload: payload,
		Fingerprint: hashKey.Request(payload.Fingerprint[:]), EmailHMAC: hashKey.Email(payload.Lead.Email),
		Quarantine: reasons, Retention: time.Hour,
	}
	if _, err := b.op.Store.Claim(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return key
}

func (b *bundle) audit(t *testing.T) []store.AuditEntry {
	t.Helper()
	entries, err := b.op.Audit(t.Context(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func (b *bundle) state(t *testing.T, key string) lead.KeyState {
	t.Helper()
	d, err := b.op.Store.ShowKey(t.Context(), "a", key)
	if err != nil {
		t.Fatal(err)
	}
	return d.State
}

const body = `{"email":"ada@example.com","source":"website","name":"Ada Lovelace","attribution":{"first":{"landing_page":"https://acme.example/","utm":{"utm_source":"news"}}}}`

// A viewer reads what holds no personal data and does nothing else: each
// write and each look at an enquiry is ErrForbidden, nothing changed and
// nothing recorded.
func TestViewerWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	quarantined := b.claim(t, body, "honeypot")
	viewer := operator.ConsoleLogin("bob", operator.RoleViewer)
	for name, err := range map[string]error{
		"release":   second(b.op.Release(ctx, viewer, "a", []string{quarantined})),
		"redrive":   second(b.op.Redrive(ctx, viewer, &store.RedriveParams{ClientID: "a", Keys: []string{quarantined}})),
		"settle":    b.op.Settle(ctx, viewer, "a", quarantined, false, ""),
		"erase":     second(b.op.Erase(ctx, viewer, "a", "ada@example.com")),
		"enquiry":   second(b.op.Enquiry(ctx, viewer, "a", quarantined)),
		"spam show": second(b.op.QuarantinedEnquiry(ctx, viewer, "a", quarantined)),
		"nobody":    second(b.op.Enquiry(ctx, operator.Actor{Role: operator.RoleOperator, Via: store.ViaConsole}, "a", quarantined)),
	} {
		if !errors.Is(err, operator.ErrForbidden) {
			t.Errorf("%s by a viewer: %v, want ErrForbidden", name, err)
		}
	}
	if st := b.state(t, quarantined); st != lead.KeyQuarantined {
		t.Errorf("the key is %s", st)
	}
	if n := len(b.audit(t)); n != 0 {
		t.Errorf("%d audit rows", n)
	}
	// What a viewer may: the lists, a lead without its enquiry, a dry
	// run, the destinations and the audit.
	if page, err := b.op.Leads(ctx, store.LeadFilter{}); err != nil || len(page.Rows) != 1 {
		t.Errorf("leads: %+v %v", page, err)
	}
	if r, err := b.op.Lead(ctx, "a", quarantined); err != nil || r.State != lead.KeyQuarantined || len(r.Callbacks) != 0 {
		t.Errorf("lead: %+v %v", r, err)
	}
	if _, err := b.op.Redrive(ctx, viewer, &store.RedriveParams{Outcome: response.CodeDownstreamUnavailable, DryRun: true}); err != nil {
		t.Errorf("a viewer's dry run: %v", err)
	}
}

// An operator's actions happen and are recorded with their name; an
// enquiry shows the attribution and is recorded as a look.
func TestOperatorActsAndIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	alice := operator.ConsoleLogin("alice", operator.RoleOperator)
	quarantined := b.claim(t, body, "too_fast")

	e, err := b.op.Enquiry(ctx, alice, "a", quarantined)
	if err != nil || e.Lead == nil || e.Lead.Name != "Ada Lovelace" || e.Lead.Attribution == nil ||
		e.Lead.Attribution.First.UTM["utm_source"] != "news" {
		t.Fatalf("enquiry: %+v %v", e, err)
	}
	done, err := b.op.Release(ctx, alice, "a", []string{quarantined, "not-a-key-of-a"})
	if err != nil || len(done.Keys) != 1 || len(done.Skipped) != 1 {
		t.Fatalf("release: %+v %v", done, err)
	}
	if st := b.state(t, quarantined); st != lead.KeyProcessing {
		t.Errorf("the released key is %s", st)
	}
	if n, err := b.op.Erase(ctx, operator.CLI, "a", "ADA@example.com"); err != nil || n != 1 {
		t.Errorf("erase: %d %v", n, err)
	}
	if _, err := b.op.Erase(ctx, operator.CLI, "nobody", "ada@example.com"); !errors.Is(err, operator.ErrUnknownClient) {
		t.Errorf("erase of an unknown client: %v", err)
	}
	var got []string
	for _, a := range b.audit(t) {
		got = append(got, a.Actor+" "+a.Via+" "+a.Action)
	}
	if want := "cli cli erase|alice console release|alice console show_enquiry"; strings.Join(got, "|") != want {
		t.Errorf("audit, newest first: %s, want %s", strings.Join(got, "|"), want)
	}
}

// A release or a redrive that names more than MaxKeys keys is refused
// before anything is done; a redrive needs one selection.
func TestBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = testkit.NewKey()
	}
	var tooMany *operator.TooManyKeysError
	if _, err := b.op.Release(ctx, operator.CLI, "a", keys); !errors.As(err, &tooMany) || tooMany.N != 10000 ||
		!strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("release of 10,000 keys: %v", err)
	}
	if _, err := b.op.Redrive(ctx, operator.CLI, &store.RedriveParams{ClientID: "a", Keys: keys}); !errors.As(err, &tooMany) {
		t.Errorf("redrive of 10,000 keys: %v", err)
	}
	for _, p := range []*store.RedriveParams{
		{},
		{Keys: []string{"k"}},
		{ClientID: "a", Keys: []string{"k"}, Outcome: response.CodeDownstreamUnavailable},
		{Outcome: response.CodeCRMRejected},
		{Outcome: response.CodeDownstreamUnavailable, Since: -time.Hour},
	} {
		if _, err := b.op.Redrive(ctx, operator.CLI, p); !errors.Is(err, operator.ErrBadRedrive) {
			t.Errorf("redrive %+v: %v, want ErrBadRedrive", p, err)
		}
	}
	if _, err := b.op.Release(ctx, operator.CLI, "a", nil); !errors.Is(err, operator.ErrNoKeys) {
		t.Errorf("release of no keys: %v", err)
	}
	if n := len(b.audit(t)); n != 0 {
		t.Errorf("%d audit rows", n)
	}
}

// The destinations' states, with their kinds and the clients using them.
func TestDestinations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.op.Store.EnsureDownstreams(t.Context(), []string{"acme-hook"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(context.Background(), `
UPDATE downstreams SET up = false, unauthorized = true, down_since = now() - interval '5 minutes', next_probe_at = now() + interval '30 seconds'
WHERE name = 'acme-hook'`); err != nil {
		t.Fatal(err)
	}
	ds, err := b.op.Destinations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]operator.DestinationReport{}
	for _, d := range ds {
		byName[d.Name] = d
	}
	hook, crm := byName["acme-hook"], byName["crm"]
	if hook.Kind != "http" || hook.State() != "unauthorized" || strings.Join(hook.Clients, ",") != "a" ||
		time.Since(hook.DownSince) < 4*time.Minute || time.Until(hook.NextProbe) < 20*time.Second {
		t.Errorf("acme-hook: %+v", hook)
	}
	if crm.State() != "up" || strings.Join(crm.Clients, ",") != "a,b" || !crm.NextProbe.IsZero() {
		t.Errorf("crm: %+v", crm)
	}
	if n := byName["notification"]; strings.Join(n.Clients, ",") != "b" {
		t.Errorf("notification: %+v", n)
	}
}

func second[T any](_ T, err error) error { return err }
