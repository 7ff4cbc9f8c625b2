// Package docsgen keeps the generated parts of the Markdown documentation:
// the sections between
//
//	<!-- BEGIN generated: NAME -->
//	<!-- END generated -->
//
// that tests fill from the code (the environment, the alerts, the metrics,
// ...), and the quick start's shell blocks, marked
//
//	<!-- docs-test: quickstart -->
//
// whose output, the ```text block that follows each, a test compares with
// what the commands really print. The tests of package docs and e2e use
// it; `make docs` runs them with -update, which writes what the code says
// instead of comparing.
package docsgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// beginMarker and endMarker delimit a generated section.
const (
	beginMarker = "<!-- BEGIN generated: %s -->"
	endMarker   = "<!-- END generated -->"
)

// QuickstartMarker precedes each shell block of the quick start.
const QuickstartMarker = "<!-- docs-test: quickstart -->"

// Section returns the content of the generated section name of doc, and
// its byte offsets (start, end) in doc.
func Section(doc []byte, name string) (content string, start, end int, err error) {
	begin := fmt.Sprintf(beginMarker, name)
	i := bytes.Index(doc, []byte(begin))
	if i < 0 {
		return "", 0, 0, fmt.Errorf("no %s", begin)
	}
	start = i + len(begin)
	j := bytes.Index(doc[start:], []byte(endMarker))
	if j < 0 {
		return "", 0, 0, fmt.Errorf("%s has no %s", begin, endMarker)
	}
	end = start + j
	if bytes.Contains(doc[end+len(endMarker):], []byte(begin)) {
		return "", 0, 0, fmt.Errorf("%s appears twice", begin)
	}
	return strings.Trim(string(doc[start:end]), "\n"), start, end, nil
}

// Replace returns doc with the generated section name holding content.
func Replace(doc []byte, name, content string) ([]byte, error) {
	_, start, end, err := Section(doc, name)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(doc[:start])
	b.WriteString("\n" + strings.Trim(content, "\n") + "\n")
	b.Write(doc[end:])
	return b.Bytes(), nil
}

// Check compares the generated section name of the file at path with
// want, and fails t when they differ; with update, it writes want into
// the file instead.
func Check(t testing.TB, path, name, want string, update bool) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, err := Section(doc, name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	want = strings.Trim(want, "\n")
	if got == want {
		return
	}
	if update {
		out, err := Replace(doc, name, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: generated section %q written", path, name)
		return
	}
	t.Errorf("%s: the generated section %q is not what the code says (make docs writes it):\n%s", path, name, FirstDifference(got, want))
}

// FirstDifference describes where two texts part, line by line: the first
// line that differs, as written and as it should be.
func FirstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d\n  written:   %q\n  should be: %q", i+1, gl, wl)
		}
	}
	return "(they differ in white space only)"
}

// Block is one shell block of the quick start and the output shown after
// it.
type Block struct {
	// Line is the line of the doc where the shell block's fence opens.
	Line int
	// Command is the shell block's text.
	Command string
	// Output is the text block's, the output shown.
	Output string
	// outStart and outEnd are the byte offsets of Output in the doc.
	outStart, outEnd int
}

// fence matches the opening of a fenced code block and its language.
var fence = regexp.MustCompile("^```([a-z]*)\\s*$")

// Quickstart returns the marked shell blocks of doc, each with the
// ```text block that must follow it (blank lines and prose may come
// between, no other code block).
func Quickstart(doc []byte) ([]Block, error) {
	type span struct {
		lang        string
		line        int
		start, end  int // offsets of the block's text
		afterMarker bool
	}
	var spans []span
	lines := strings.SplitAfter(string(doc), "\n")
	off := 0
	marked := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\n")
		if strings.TrimSpace(l) == QuickstartMarker {
			marked = true
			off += len(lines[i])
			continue
		}
		m := fence.FindStringSubmatch(l)
		if m == nil {
			if strings.TrimSpace(l) != "" && marked {
				return nil, fmt.Errorf("line %d: %s is not followed by a code block", i+1, QuickstartMarker)
			}
			off += len(lines[i])
			continue
		}
		sp := span{lang: m[1], line: i + 1, afterMarker: marked}
		marked = false
		off += len(lines[i])
		sp.start = off
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.TrimRight(lines[j], "\n") == "```" {
				break
			}
			off += len(lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: a code block that never closes", i+1)
		}
		sp.end = off
		off += len(lines[j])
		spans = append(spans, sp)
		i = j
	}
	var blocks []Block
	for k, sp := range spans {
		if !sp.afterMarker {
			continue
		}
		if sp.lang != "sh" {
			return nil, fmt.Errorf("line %d: %s marks a %q block, not a sh one", sp.line, QuickstartMarker, sp.lang)
		}
		if k+1 >= len(spans) || spans[k+1].lang != "text" || spans[k+1].afterMarker {
			return nil, fmt.Errorf("line %d: the quick start's shell block is not followed by a ```text block of its output", sp.line)
		}
		out := spans[k+1]
		blocks = append(blocks, Block{
			Line: sp.line, Command: string(doc[sp.start:sp.end]),
			Output: string(doc[out.start:out.end]), outStart: out.start, outEnd: out.end,
		})
	}
	return blocks, nil
}

// ReplaceOutputs returns doc with each block's output replaced by
// outputs[i] (blocks as Quickstart returned them for doc).
func ReplaceOutputs(doc []byte, blocks []Block, outputs []string) ([]byte, error) {
	if len(blocks) != len(outputs) {
		return nil, errors.New("docsgen: one output per block")
	}
	var b bytes.Buffer
	last := 0
	for i, bl := range blocks {
		b.Write(doc[last:bl.outStart])
		if o := strings.Trim(outputs[i], "\n"); o != "" {
			b.WriteString(o + "\n")
		}
		last = bl.outEnd
	}
	b.Write(doc[last:])
	return b.Bytes(), nil
}

// volatile are the parts of a command's output that change from run to
// run, each with what it is written as when outputs are compared.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<uuid>"},
	{regexp.MustCompile(`msg_[0-9a-f]{32}`), "msg_<id>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`(?m)^(Date|X-Request-Id): .*$`), "$1: <varies>"},
}

// NormalizeOutput returns a command's output as it is compared: without
// carriage returns, trailing white space and blank lines at either end,
// and with ids, times, dates and request ids written as placeholders.
func NormalizeOutput(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	s = strings.Trim(strings.Join(lines, "\n"), "\n")
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}
