package callers_test

import (
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
)

const destinationsFile = `
destinations:
  - name: acme-crm
    kind: http
    url: https://crm.acme.example/api
    token: s3cret-crm-token
    mode: create
    rate_limit: 100/10s
  - name: sales-hook
    kind: http
    url: https://hooks.acme.example/T0/B0/s3cret-path
clients:
  - id: acme
    crm: acme-crm
    notify: [sales-hook, notification]
  - id: quiet
    notify: []
  - id: plain
`

func TestDestinations(t *testing.T) {
	t.Parallel()
	set, err := callers.ParseFile([]byte(destinationsFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(set.Destinations()); n != 2 {
		t.Fatalf("%d destinations", n)
	}
	d := set.Destinations()[0]
	if d.Name != "acme-crm" || d.Kind != "http" || d.Value("mode") != "create" || d.RateLimit.N != 100 {
		t.Errorf("first destination %+v", d)
	}
	for _, tt := range []struct {
		client, crm string
		notify      []string
	}{
		{"acme", "acme-crm", []string{"sales-hook", "notification"}},
		{"quiet", "crm", []string{}},
		{"plain", "crm", []string{"notification"}},
		{"unknown", "crm", []string{"notification"}},
	} {
		if got := set.CRMOf(tt.client); got != tt.crm {
			t.Errorf("%s: crm %q, want %q", tt.client, got, tt.crm)
		}
		if got := set.NotifyOf(tt.client); strings.Join(got, ",") != strings.Join(tt.notify, ",") || (got == nil) != (tt.notify == nil) {
			t.Errorf("%s: notify %q, want %q", tt.client, got, tt.notify)
		}
	}
	if !set.UsesDefault(callers.DefaultCRM) || !set.UsesDefault(callers.DefaultNotification) {
		t.Error("quiet and plain use the environment's crm, plain its notification")
	}
	only, err := callers.ParseFile([]byte(strings.ReplaceAll(strings.ReplaceAll(destinationsFile, "  - id: quiet\n    notify: []\n", ""),
		"  - id: plain\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	if only.UsesDefault(callers.DefaultCRM) || !only.UsesDefault(callers.DefaultNotification) {
		t.Error("acme alone uses no environment's crm, and its notification")
	}
}

func TestBadDestinations(t *testing.T) {
	t.Parallel()
	secrets := []string{"s3cret-crm-token", "s3cret-path"}
	for _, tt := range []struct{ name, edit, want string }{
		{"UnknownKind", "kind: http\n    url: https://crm", "kind: dynamics\n    url: https://crm"},
		{"MissingMember", "    url: https://crm.acme.example/api\n", ""},
		{"NameTwice", "name: sales-hook", "name: acme-crm"},
		{"ReservedName", "name: sales-hook", "name: notification"},
		{"ClientNamesAMissingDestination", "crm: acme-crm", "crm: acme-crn"},
		{"AChannelAsItsCRM", "notify: [sales-hook, notification]", "notify: [sales-hook, crm]"},
		{"TheEnvironmentsCRMAsAChannel", "crm: acme-crm", "crm: notification"},
		{"UnknownMapSource", "    rate_limit: 100/10s\n", "    rate_limit: 100/10s\n    map: {jobtitle: fields.role, x: cookies}\n"},
		{"MapOnAnHTTPKind", "    rate_limit: 100/10s\n", "    rate_limit: 100/10s\n    map: {jobtitle: fields.role}\n"},
		{"BadRateLimit", "rate_limit: 100/10s", "rate_limit: lots"},
		{"UnknownMember", "    mode: create\n", "    mode: create\n    s3cret-crm-token: x\n"},
		{"SixChannels", "notify: [sales-hook, notification]", "notify: [sales-hook, notification, a, b, c, d]"},
		{"ChannelTwice", "notify: [sales-hook, notification]", "notify: [sales-hook, sales-hook]"},
		{"BadMode", "mode: create", "mode: s3cret-crm-token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := strings.Replace(destinationsFile, tt.edit, tt.want, 1)
			if file == destinationsFile {
				t.Fatal("the edit changed nothing")
			}
			_, err := callers.ParseFile([]byte(file))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("%q is more than one line", msg)
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("%q shows a secret", msg)
				}
			}
			if !strings.Contains(msg, "destination") && !strings.Contains(msg, "client") {
				t.Errorf("%q names neither the destination nor the client", msg)
			}
			t.Log(msg)
		})
	}
}
