package lead_test

import (
	"bytes"
	"testing"

	"github.com/leadintake/leadintake/lead"
)

func TestContent(t *testing.T) {
	t.Parallel()
	key := lead.HashKey("lead-test-pii-hash-key-0123456789abc")
	content := func(body string) []byte {
		t.Helper()
		p, err := lead.Decode([]byte(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		return key.Content(p)
	}
	base := content(`{"email":"ada@example.com","source":"website","message":"hi","utm":{"source":"a"}}`)
	if len(base) != 32 {
		t.Fatalf("content %x", base)
	}
	if got := content(`{"utm":{"source":"b","medium":"x"},"message":"hi","source":"website","email":"ada@example.com"}`); !bytes.Equal(got, base) {
		t.Error("another utm, or another order, is other content")
	}
	if got := content(`{"email":"ada@example.com","source":"website","message":"hi"}`); !bytes.Equal(got, base) {
		t.Error("no utm is other content")
	}
	// Nor is the attribution: the same enquiry from another campaign, or
	// another page of the site, is a possible duplicate all the same.
	for _, body := range []string{
		`{"email":"ada@example.com","source":"website","message":"hi","attribution":{"first":{"landing_page":"https://acme.example/?utm_source=google","utm":{"source":"google"},"click_ids":{"gclid":"abc123"}},"last":{"landing_page":"https://acme.example/contact","at":"2025-03-01T10:00:00Z"}}}`,
		`{"email":"ada@example.com","source":"website","message":"hi","attribution":{"last":{"referrer":"https://news.example/"}}}`,
		`{"email":"ada@example.com","source":"website","message":"hi","attribution":null}`,
	} {
		if got := content(body); !bytes.Equal(got, base) {
			t.Errorf("an attribution makes other content: %s", body)
		}
	}
	for _, other := range []string{
		`{"email":"eve@example.com","source":"website","message":"hi"}`,
		`{"email":"ada@example.com","source":"website","message":"hello"}`,
		`{"email":"ada@example.com","source":"ads","message":"hi"}`,
		`{"email":"ada@example.com","source":"website","message":"hi","fields":{"budget":"10k"}}`,
	} {
		if bytes.Equal(content(other), base) {
			t.Errorf("%s has the same content", other)
		}
	}
	if bytes.Equal(lead.HashKey("another-pii-hash-key-0123456789abcdef").Content(mustDecode(t)), base) {
		t.Error("the content does not depend on the key")
	}
}

func mustDecode(t *testing.T) *lead.Payload {
	t.Helper()
	p, err := lead.Decode([]byte(`{"email":"ada@example.com","source":"website","message":"hi"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
