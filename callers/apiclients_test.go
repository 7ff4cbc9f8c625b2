package callers_test

import (
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
)

func TestParseAPIClients(t *testing.T) {
	t.Parallel()

	t.Run("AuthenticatesEveryListedToken", func(t *testing.T) {
		t.Parallel()
		// A rotation: acme has an old and a new token for a while.
		clients, err := callers.ParseAPIClients(" acme=" + hashOf("old") + ", acme=" + hashOf("new") + ",beta=" + hashOf("b") + ",")
		if err != nil {
			t.Fatal(err)
		}
		for token, want := range map[string]string{"old": "acme", "new": "acme", "b": "beta"} {
			if got, ok := clients.Authenticate(token); !ok || got != want {
				t.Errorf("token %q: client %q %v, want %q", token, got, ok, want)
			}
		}
		if got, ok := clients.Authenticate("nope"); ok {
			t.Errorf("unknown token authenticated as %q", got)
		}
	})

	for name, value := range map[string]string{
		"RefusesEmptyList":         " , ",
		"RefusesMissingHash":       "acme",
		"RefusesShortHash":         "acme=abcd",
		"RefusesNonHexHash":        "acme=" + strings.Repeat("z", 64),
		"RefusesBadClientID":       "ac me=" + hashOf("t"),
		"RefusesLongClientID":      strings.Repeat("c", 65) + "=" + hashOf("t"),
		"RefusesSameHashTwice":     "acme=" + hashOf("t") + ",beta=" + hashOf("t"),
		"RefusesTokenInsteadOfSum": "acme=secret-token",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := callers.ParseAPIClients(value); err == nil {
				t.Fatalf("ParseAPIClients(%q) accepted", value)
			}
		})
	}
}
