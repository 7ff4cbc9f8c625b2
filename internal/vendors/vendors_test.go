package vendors

import (
	"slices"
	"testing"
)

func TestParseNames(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"all":                  Names,
		"":                     nil,
		"none":                 nil,
		"slack,hubspot":        {HubSpot, Slack},
		" teams , teams ":      {Teams},
		"pipedrive,salesforce": {Salesforce, Pipedrive},
	} {
		got, err := ParseNames(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseNames(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"zoho", "hubspot,", "all,slack"} {
		if _, err := ParseNames(in); err == nil {
			t.Errorf("ParseNames(%q): no error", in)
		}
	}
}
