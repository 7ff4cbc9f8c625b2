package slack_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination/slack"
)

// TestDocsClientsFile: the first clients file of docs/destinations/slack.md
// parses, and configures a bot and a webhook.
func TestDocsClientsFile(t *testing.T) {
	page, err := os.ReadFile("../../docs/destinations/slack.md")
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, block := range strings.Split(string(page), "```yaml\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.HasPrefix(block, "destinations:") {
			file = block
			break
		}
	}
	if file == "" {
		t.Fatal("the page has no clients file")
	}
	set, err := callers.ParseFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, c := range set.Destinations() {
		ch, err := slack.Spec.NewChannel(c)
		if err != nil {
			t.Fatal(err)
		}
		switch ch.(type) {
		case *slack.Bot:
			modes = append(modes, c.Name+" bot")
		case *slack.Webhook:
			modes = append(modes, c.Name+" webhook")
		}
	}
	if want := []string{"sales-slack bot", "support-slack webhook"}; !slices.Equal(modes, want) {
		t.Errorf("destinations %v, want %v", modes, want)
	}
}
