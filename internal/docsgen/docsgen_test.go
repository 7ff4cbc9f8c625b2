package docsgen

import (
	"strings"
	"testing"
)

const page = "# A page\n\n<!-- BEGIN generated: t -->\nold\n<!-- END generated -->\n\n" +
	"<!-- docs-test: quickstart -->\n```sh\necho hi\n```\n\nit says:\n\n```text\nho\n```\n\n```sh\nnot run\n```\n"

func TestReplace(t *testing.T) {
	t.Parallel()
	got, err := Replace([]byte(page), "t", "new\nrows\n")
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _, _ := Section(got, "t"); c != "new\nrows" {
		t.Errorf("section %q after Replace", c)
	}
	if !strings.HasPrefix(string(got), "# A page\n") || !strings.Contains(string(got), "echo hi") {
		t.Errorf("Replace changed what is outside the section:\n%s", got)
	}
	if _, err := Replace([]byte(page), "missing", "x"); err == nil {
		t.Error("Replace of a section that is not there: no error")
	}
}

func TestQuickstart(t *testing.T) {
	t.Parallel()
	blocks, err := Quickstart([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].Command != "echo hi\n" || blocks[0].Output != "ho\n" {
		t.Fatalf("blocks %+v", blocks)
	}
	out, err := ReplaceOutputs([]byte(page), blocks, []string{"hi"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "```text\nhi\n```") || !strings.Contains(string(out), "not run") {
		t.Errorf("ReplaceOutputs:\n%s", out)
	}
	for _, bad := range []string{
		"<!-- docs-test: quickstart -->\n```sh\necho\n```\n",                      // no output block
		"<!-- docs-test: quickstart -->\nprose\n```sh\necho\n```\n```text\n```\n", // prose between
		"<!-- docs-test: quickstart -->\n```go\nx\n```\n```text\n```\n",           // not sh
	} {
		if _, err := Quickstart([]byte(bad)); err == nil {
			t.Errorf("Quickstart(%q): no error", bad)
		}
	}
}

func TestNormalizeOutput(t *testing.T) {
	t.Parallel()
	a := "HTTP/1.1 202 Accepted\r\nX-Request-Id: abc\r\nDate: Wed, 02 Dec 2026 01:41:01 GMT\r\n\r\n" +
		`{"lead_id":"01a23469-8a8e-7745-89f7-665708f58452","at":"2026-12-02T01:41:01.710569Z"}` + "\n\n"
	b := "HTTP/1.1 202 Accepted\nX-Request-Id: xyz\nDate: Thu, 03 Dec 2026 09:00:00 GMT\n\n" +
		`{"lead_id":"0193a6f2-5c1e-7b4a-9d3e-2f1a8c7b6d5e","at":"2026-12-03T09:00:00Z"}`
	if NormalizeOutput(a) != NormalizeOutput(b) {
		t.Errorf("%q\n!=\n%q", NormalizeOutput(a), NormalizeOutput(b))
	}
	if NormalizeOutput("Content-Length: 166") == NormalizeOutput("Content-Length: 168") {
		t.Error("a length is compared, not normalized")
	}
}
