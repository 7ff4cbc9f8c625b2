// Package screenshot renders a lead's Slack message, the Block Kit the slack
// kind sends, in headless Chromium with a page of our own that imitates
// Slack's look, for docs/destinations/slack.png:
//
//	SLACK_SCREENSHOT=$PWD/docs/destinations/slack.png go test ./destination/slack/internal/screenshot
//
// Without SLACK_SCREENSHOT the test is skipped: make test does not redo
// the picture. The emoji and the font are Debian's fonts-noto-color-emoji
// and fonts-lato; without them Chromium draws the emoji as boxes.
package screenshot

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"html/template"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/slack"
	"github.com/leadintake/leadintake/internal/browsertest"
	"github.com/leadintake/leadintake/lead"
)

//go:embed page.html
var page string

// record is a realistic lead, with an owner to mention.
func record() *destination.Record {
	return &destination.Record{
		LeadID: "0193a8f2-5c1e-7d40-b7a9-3e5f2c81d604", ExternalRef: "li_q3Zt8vKx1mP0aR7cW2yNfLs5dHj4uEo9",
		Lead: &lead.Lead{
			Email: "grace.hopper@cobol-systems.example", Source: "pricing-page", Name: "Grace Hopper",
			Company: "Cobol Systems GmbH", Phone: "+49 30 1234 5678",
			Message: "Hi! We're 40 engineers evaluating lead-routing tools. Could we get a demo next week, " +
				"ideally Tuesday or Wednesday afternoon (CET)?\n\nThanks, Grace",
		},
		Score: 87, Tier: "hot",
		Owner: &destination.Owner{Name: "alice", Slack: "U024BE7LH", Email: "alice@acme.example"},
	}
}

func TestScreenshot(t *testing.T) {
	out := os.Getenv("SLACK_SCREENSHOT")
	if out == "" {
		t.Skip("SLACK_SCREENSHOT names the PNG to write")
	}
	m := slack.NewMessage(record())
	blocks, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	var html bytes.Buffer
	err = template.Must(template.New("page").Parse(page)).Execute(&html, map[string]any{
		// The blocks as the kind sends them, and the workspace's names
		// of the members they mention.
		"Blocks": template.JS(blocks), "Users": map[string]string{"U024BE7LH": "Alice Martin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(html.Bytes())
	}))
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tab, stop := browsertest.Start(t, ctx, 760, 900)
	defer stop()
	if err := chromedp.Do(tab, chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS("#message.rendered"))); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(tab, chromedp.Screenshot(chromedp.CSS("#pane")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}
