package docs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"

	"github.com/leadintake/leadintake/callers"
)

// update makes the tests of generated sections write what the code says
// instead of comparing (make docs).
var update = flag.Bool("update", false, "write the generated sections of the docs instead of checking them")

// root is the repository's root, from this package's directory.
const root = ".."

// page is one Markdown file, parsed.
type page struct {
	// path is the file's path from the repository's root, with slashes.
	path   string
	source []byte
	doc    ast.Node
	// anchors are the ids GitHub gives the page's headings.
	anchors map[string]bool
}

// topLevelPages are the Markdown files at the root that the docs link to
// and that are checked like docs/*.md.
var topLevelPages = []string{"README.md", "SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md"}

// pages returns every checked page, parsed once for all tests.
var pages = sync.OnceValues(func() ([]*page, error) {
	paths := []string{}
	for _, p := range topLevelPages {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			paths = append(paths, p)
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	// The pages of each destination kind, and any other folder of pages.
	deeper, err := filepath.Glob(filepath.Join(root, "docs", "*", "*.md"))
	if err != nil {
		return nil, err
	}
	docs = append(docs, deeper...)
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		paths = append(paths, filepath.ToSlash(rel))
	}
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	var out []*page
	for _, p := range paths {
		src, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		doc := md.Parser().Parse(text.NewReader(src))
		out = append(out, &page{path: p, source: src, doc: doc, anchors: anchorsOf(doc, src)})
	}
	return out, nil
})

func loadPages(t *testing.T) []*page {
	t.Helper()
	ps, err := pages()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 10 {
		t.Fatalf("read %d pages; the docs are gone or the reader is broken", len(ps))
	}
	return ps
}

// plainText is the text of n's inline content, as GitHub renders it for an
// anchor: code spans' text without their backticks, links' text.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// Slug is the anchor GitHub gives a heading of that text: lower-cased,
// every character but letters, digits, marks, connector punctuation (_),
// spaces and hyphens dropped, each space a hyphen.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchorsOf lists the anchors of doc's headings, GitHub's way: a heading
// whose slug was taken gets -1, -2, ...
func anchorsOf(doc ast.Node, src []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if h, ok := n.(*ast.Heading); ok && entering {
			s := Slug(plainText(h, src))
			id := s
			if k := seen[s]; k > 0 {
				id = fmt.Sprintf("%s-%d", s, k)
			}
			seen[s]++
			anchors[id] = true
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return anchors
}

// link is one link or image of a page.
type link struct {
	dest string
	line int
}

// lineOf returns the line of offset in src.
func lineOf(src []byte, offset int) int {
	return strings.Count(string(src[:min(offset, len(src))]), "\n") + 1
}

// nodeOffset returns an offset of n in the source, for messages.
func nodeOffset(n ast.Node) int {
	for c := n; c != nil; c = c.Parent() {
		if c.Type() == ast.TypeBlock && c.Lines().Len() > 0 {
			return c.Lines().At(0).Start
		}
		if t, ok := c.(*ast.Text); ok {
			return t.Segment.Start
		}
		if fc := c.FirstChild(); fc != nil {
			if t, ok := fc.(*ast.Text); ok {
				return t.Segment.Start
			}
		}
	}
	return 0
}

// links returns the page's links and images.
func (p *page) links() []link {
	var out []link
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			out = append(out, link{string(n.Destination), lineOf(p.source, nodeOffset(n))})
		case *ast.Image:
			out = append(out, link{string(n.Destination), lineOf(p.source, nodeOffset(n))})
		case *ast.AutoLink:
			out = append(out, link{string(n.URL(p.source)), lineOf(p.source, nodeOffset(n))})
		}
		return ast.WalkContinue, nil
	})
	return out
}

// pageAt returns the parsed page of path (from the root), if it is one.
func pageAt(ps []*page, path string) *page {
	for _, p := range ps {
		if p.path == path {
			return p
		}
	}
	return nil
}

// Every relative link of the docs leads to a file or directory of the
// repository, and every #anchor to a heading of its page. External links
// are not fetched.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	ps := loadPages(t)
	checked := 0
	for _, p := range ps {
		for _, l := range p.links() {
			if strings.Contains(l.dest, "://") || strings.HasPrefix(l.dest, "mailto:") {
				continue
			}
			checked++
			if err := resolve(ps, p, l.dest); err != nil {
				t.Errorf("%s:%d: link %q: %v", p.path, l.line, l.dest, err)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d relative links; the reader misses them", checked)
	}
}

// resolve checks one relative link of p.
func resolve(ps []*page, p *page, dest string) error {
	path, frag, _ := strings.Cut(dest, "#")
	target := p.path
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return fmt.Errorf("an absolute path: write it relative to %s", p.path)
		}
		target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.path), path)))
		if strings.HasPrefix(target, "../") {
			return fmt.Errorf("outside the repository")
		}
		if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			return fmt.Errorf("no such file or directory %s", target)
		}
	}
	if frag == "" {
		return nil
	}
	tp := pageAt(ps, target)
	if tp == nil {
		return fmt.Errorf("#%s in %s, which is not a checked Markdown page", frag, target)
	}
	if !tp.anchors[frag] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", target, frag)
	}
	return nil
}

// codeSpans returns the text of the page's inline code spans and link
// destinations, outside code blocks, with their lines.
func (p *page) codeSpans() []link {
	var out []link
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if cs, ok := n.(*ast.CodeSpan); ok && entering {
			out = append(out, link{plainText(cs, p.source), lineOf(p.source, nodeOffset(cs))})
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return out
}

// pathLike matches what may be a path of the repository: segments of
// letters, digits, ., _, @, - and * joined by slashes.
var pathLike = regexp.MustCompile(`^[A-Za-z0-9_.@*-]+(/[A-Za-z0-9_.@*-]+)*/?$`)

// rootFiles are the files at the root that the docs cite without a slash.
var rootFiles = []string{"Makefile", "Dockerfile", "docker-compose.yml", "go.mod", "LICENSE", "README.md",
	"SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md"}

// testName matches a Go test, benchmark, fuzz or example name, with a
// subtest.
var testName = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)[A-Z0-9_]\w*(/\w+)*$`)

// Every file path and Go test name the docs cite exists: a code span
// whose first segment is a top-level entry of the repository must name a
// file or directory (a * matches as in a glob), and a TestXxx must be a
// test function (with its subtest's name in its file).
func TestCitedPathsAndTestsExist(t *testing.T) {
	t.Parallel()
	ps := loadPages(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			top[e.Name()] = true
		}
	}
	tests := testFunctions(t)
	paths, names := 0, 0
	for _, p := range ps {
		for _, s := range p.codeSpans() {
			switch {
			case testName.MatchString(s.dest):
				names++
				fn, sub, _ := strings.Cut(s.dest, "/")
				file, ok := tests[fn]
				if !ok {
					t.Errorf("%s:%d: %s: no such test function", p.path, s.line, s.dest)
					continue
				}
				if sub != "" {
					src, _ := os.ReadFile(file)
					last := sub[strings.LastIndex(sub, "/")+1:]
					if !strings.Contains(string(src), `"`+last+`"`) && !strings.Contains(string(src), last) {
						t.Errorf("%s:%d: %s: %s has no subtest %s", p.path, s.line, s.dest, file, last)
					}
				}
			case pathLike.MatchString(s.dest) && !strings.Contains(s.dest, "..") &&
				(strings.Contains(s.dest, "/") && top[strings.Split(s.dest, "/")[0]] || slices.Contains(rootFiles, s.dest)):
				paths++
				matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(s.dest, "/"))))
				if err != nil || len(matches) == 0 {
					t.Errorf("%s:%d: `%s`: no such file or directory", p.path, s.line, s.dest)
				}
			}
		}
	}
	if paths < 30 || names < 10 {
		t.Errorf("checked %d paths and %d test names; the reader misses them", paths, names)
	}
}

// testFunctions maps every test, fuzz, benchmark and example function of
// the repository (both modules) to its file.
func testFunctions(t *testing.T) map[string]string {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((Test|Fuzz|Benchmark|Example)\w*)\(`)
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// codeBlocks returns the page's fenced code blocks of language lang.
func (p *page) codeBlocks(lang string) []link {
	var out []link
	_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fb, ok := n.(*ast.FencedCodeBlock)
		if !ok || !entering || string(fb.Language(p.source)) != lang {
			return ast.WalkContinue, nil
		}
		var b strings.Builder
		for i := 0; i < fb.Lines().Len(); i++ {
			seg := fb.Lines().At(i)
			b.Write(seg.Value(p.source))
		}
		line := 0
		if fb.Lines().Len() > 0 {
			line = lineOf(p.source, fb.Lines().At(0).Start)
		}
		out = append(out, link{b.String(), line})
		return ast.WalkSkipChildren, nil
	})
	return out
}

// clientsFileMembers mark a YAML example as (part of) a clients file.
var clientsFileMembers = regexp.MustCompile(`(?m)^\s*-?\s*(clients|tokens_sha256|publishable_keys|webhook_secret|callback|spam|captcha|origins):`)

// Every YAML example of a clients file is a whole file that the service's
// own parser reads without an error.
func TestClientsFileExamples(t *testing.T) {
	t.Parallel()
	n := 0
	for _, p := range loadPages(t) {
		for _, b := range p.codeBlocks("yaml") {
			if !clientsFileMembers.MatchString(b.dest) {
				continue
			}
			n++
			if _, err := callers.ParseFile([]byte(b.dest)); err != nil {
				t.Errorf("%s:%d: the clients file example does not parse: %v", p.path, b.line, err)
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d clients file examples; the docs have at least two", n)
	}
}

// The slugs follow GitHub's rules.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"POST /v1/leads: submit one enquiry":            "post-v1leads-submit-one-enquiry",
		"Waiting: Prefer: wait":                         "waiting-prefer-wait",
		"The snippet: leadintake.js":                    "the-snippet-leadintakejs",
		"PII_HASH_KEY":                                  "pii_hash_key",
		"One key's life":                                "one-keys-life",
		"How cost grows (make bench-scale)":             "how-cost-grows-make-bench-scale",
		"Before and after, and what each feature costs": "before-and-after-and-what-each-feature-costs",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
