package web_test

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/web"
)

// readFile reads a file of the repository, relative to this package.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sha384Integrity is a Subresource Integrity hash, computed here apart
// from the package's own.
func sha384Integrity(b []byte) string {
	sum := sha512.Sum384(b)
	return "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
}

// The package a site hosts or bundles: one version, in package.json, and
// the module and declarations it names.
func TestSDKPackage(t *testing.T) {
	t.Parallel()
	var pkg struct {
		Name, Version, Type, Main, Types string
		Files                            []string
	}
	if err := json.Unmarshal(readFile(t, "sdk/package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Version != web.SnippetVersion || pkg.Type != "module" || pkg.Main != "./leadintake.js" || pkg.Types != "./leadintake.d.ts" ||
		!slices.Equal(pkg.Files, []string{"leadintake.js", "leadintake.d.ts"}) {
		t.Errorf("sdk/package.json %+v, SnippetVersion %q", pkg, web.SnippetVersion)
	}
	// The api serves the package's file, byte for byte.
	if src := readFile(t, "sdk/leadintake.js"); string(src) != string(web.SnippetSource()) {
		t.Error("the embedded snippet is not sdk/leadintake.js")
	}
	if got, want := web.SnippetIntegrity, sha384Integrity(readFile(t, "sdk/leadintake.js")); got != want {
		t.Errorf("SnippetIntegrity %s, want %s", got, want)
	}
}

// publishedSnippets pins every version of the snippet that was ever
// published (committed with its version in sdk/package.json) to the
// Subresource Integrity hash of its bytes. A page pins a version's URL
// with that hash, and browsers and caches keep the versioned URL for a
// year (immutable): a published version's bytes never change. Any change
// to sdk/leadintake.js, however small, is a new version: bump
// sdk/package.json and add the new version here, with its hash, and leave
// the earlier lines as they are.
//
// (1.0.0 was once committed with other bytes,
// sha384-p6F5B7qOV5IRcOFRSlSGgOc/z9vm0SQ2qEmsyyabzZzNN62ROv9tb3zrH4GEg1cx,
// and changed under the same version before this table existed; the
// hash below is the one the README gave for it.)
var publishedSnippets = map[string]string{
	"1.0.0": "sha384-le3KPGvLDop1hk8KC5kFXEls+/mii27vhRly7Ua9OIMwrwkZwj9XsmL1EkNCo0IQ",
	// attachForm sends no password, hidden or file input; a 502 without
	// CORS headers is the api out of reach, not a refusal; back online,
	// stored enquiries go at once.
	"1.1.0": "sha384-jVRxcc3XQCHVxvVCxE5EOJmjEYUVdDgs/d7JN9i3PD/D5nMWdIGy/Ehygk+oVSGJ",
	// Attribution: the first touch kept 90 days and the page of the form,
	// fixed with the enquiry; attribution: false turns it off.
	"1.2.0": "sha384-+Vigc8fYWgDlVuJ8x/FIl2kGCEml7bYJR+zY4Li/tQEZ9qeBU26w72ZQaqU4H5xE",
}

// The snippet's version is published, and its bytes are the ones its
// version was published with: a byte changed without a new version fails
// here. The api serves those bytes under the version, and no version it
// does not have (the api serves its own version only).
func TestPublishedSnippetsArePinned(t *testing.T) {
	t.Parallel()
	want, ok := publishedSnippets[web.SnippetVersion]
	if !ok {
		t.Fatalf("version %s (sdk/package.json) is not in publishedSnippets: publish it with its hash, %s",
			web.SnippetVersion, sha384Integrity(readFile(t, "sdk/leadintake.js")))
	}
	if got := sha384Integrity(readFile(t, "sdk/leadintake.js")); got != want {
		t.Fatalf("sdk/leadintake.js has %s, but version %s was published as %s: a published version's bytes never change; "+
			"bump the version in sdk/package.json and add it to publishedSnippets", got, web.SnippetVersion, want)
	}
	if web.SnippetIntegrity != want {
		t.Errorf("SnippetIntegrity %s, want %s", web.SnippetIntegrity, want)
	}
	seen := map[string]string{}
	for version, hash := range publishedSnippets {
		if !regexp.MustCompile(`^sha384-[A-Za-z0-9+/]{64}$`).MatchString(hash) {
			t.Errorf("version %s: %q is no sha384 integrity hash", version, hash)
		}
		if other, dup := seen[hash]; dup {
			t.Errorf("versions %s and %s have the same bytes: a new version is a change", version, other)
		}
		seen[hash] = version
	}

	h := web.Snippet()
	for version := range publishedSnippets {
		res := get(t, h, http.MethodGet, "/v1/sdk/leadintake@"+version+".js")
		switch {
		case version == web.SnippetVersion:
			if res.Code != http.StatusOK || sha384Integrity(res.Body.Bytes()) != want {
				t.Errorf("GET of the current version %s: %d, %s; want 200 and the bytes of %s", version, res.Code, sha384Integrity(res.Body.Bytes()), want)
			}
		case res.Code != http.StatusNotFound:
			t.Errorf("GET of the earlier version %s: %d, want 404 (the api serves its own version only)", version, res.Code)
		}
	}
}

// docs/forms.md gives the current version's integrity hash, with which a
// site pins the versioned URL: it must be the hash of the file as it is.
func TestFormsPageIntegrity(t *testing.T) {
	t.Parallel()
	page := string(readFile(t, "../docs/forms.md"))
	want := sha384Integrity(readFile(t, "sdk/leadintake.js"))
	hashes := regexp.MustCompile(`sha384-[A-Za-z0-9+/]{64}`).FindAllString(page, -1)
	if len(hashes) == 0 {
		t.Fatalf("docs/forms.md gives no sha384 integrity hash; the snippet's is %s", want)
	}
	for _, h := range hashes {
		if h != want {
			t.Errorf("docs/forms.md gives the integrity %s; sdk/leadintake.js %s has %s", h, web.SnippetVersion, want)
		}
	}
	if url := "leadintake@" + web.SnippetVersion + ".js"; !strings.Contains(page, url) {
		t.Errorf("docs/forms.md does not name the current versioned URL, %s", url)
	}
}

// docs/attribution.md gives the version that brought attribution, 1.2.0,
// with its integrity hash: a published version's, as the README's.
func TestDocsAttributionIntegrity(t *testing.T) {
	t.Parallel()
	page := string(readFile(t, "../docs/attribution.md"))
	hashes := regexp.MustCompile(`sha384-[A-Za-z0-9+/]{64}`).FindAllString(page, -1)
	versions := regexp.MustCompile(`leadintake@([0-9A-Za-z._-]+)\.js`).FindAllStringSubmatch(page, -1)
	if len(hashes) == 0 || len(versions) == 0 {
		t.Fatalf("docs/attribution.md gives %d hashes and %d versioned URLs; want the version 1.2.0's", len(hashes), len(versions))
	}
	for _, v := range versions {
		if v[1] != "1.2.0" {
			t.Errorf("docs/attribution.md names %s, want the version that brought attribution, 1.2.0", v[0])
		}
	}
	for _, h := range hashes {
		if h != publishedSnippets["1.2.0"] {
			t.Errorf("docs/attribution.md gives the integrity %s; version 1.2.0 was published as %s", h, publishedSnippets["1.2.0"])
		}
	}
}

// exported lists the names a module exports and, for a function, its
// parameters: from the JavaScript module or from its declarations.
var exportPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^export (?:declare )?(?:async )?function (\w+)\(([^)]*)\)`),
	regexp.MustCompile(`(?m)^export (?:declare )?(?:const|class) (\w+)()`),
}

func exported(src string) map[string][]string {
	names := map[string][]string{}
	for _, re := range exportPatterns {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			var params []string
			depth := 0
			for p := range strings.SplitSeq(m[2], ",") {
				// Only the top-level parameter names: "options?: {a; b}" is options.
				if depth == 0 && strings.TrimSpace(p) != "" {
					name, _, _ := strings.Cut(strings.TrimSpace(p), ":")
					name, _, _ = strings.Cut(name, "=")
					params = append(params, strings.TrimSuffix(strings.TrimSpace(name), "?"))
				}
				depth += strings.Count(p, "{") - strings.Count(p, "}")
			}
			names[m[1]] = params
		}
	}
	return names
}

// The declarations name what the module exports, with the same parameters:
// a quick check that needs no tools. TestSDKDeclarationsTypeCheck
// compares the types too.
func TestSDKDeclarationsNameTheExports(t *testing.T) {
	t.Parallel()
	js := exported(string(readFile(t, "sdk/leadintake.js")))
	dts := exported(string(readFile(t, "sdk/leadintake.d.ts")))
	for _, want := range []string{"submitLead", "attachForm", "resumeLead", "pendingLead", "leadFromForm", "OutcomeUnknown", "PROGRESS_EVENT"} {
		if _, ok := js[want]; !ok {
			t.Errorf("the module does not export %s", want)
		}
	}
	for name, params := range js {
		if got, ok := dts[name]; !ok {
			t.Errorf("leadintake.d.ts does not declare %s", name)
		} else if !slices.Equal(got, params) {
			t.Errorf("%s: declared with parameters %q, the module's are %q", name, got, params)
		}
	}
	for name := range dts {
		if _, ok := js[name]; !ok {
			t.Errorf("leadintake.d.ts declares %s, which the module does not export", name)
		}
	}
}

// compatCheck asserts, export by export, that the declarations and the
// types TypeScript reads from the module's own JSDoc are the same types.
const compatCheck = `import * as declared from "./leadintake.js";
import * as module from "./gen/leadintake.js";

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

export const names: Same<keyof typeof declared, keyof typeof module> = true;
export const progress: Same<typeof declared.PROGRESS_EVENT, typeof module.PROGRESS_EVENT> = true;
export const outcome: Same<typeof declared.OutcomeUnknown, typeof module.OutcomeUnknown> = true;
export const outcomeInstance: Same<declared.OutcomeUnknown, module.OutcomeUnknown> = true;
export const pending: Same<typeof declared.pendingLead, typeof module.pendingLead> = true;
export const submit: Same<typeof declared.submitLead, typeof module.submitLead> = true;
export const resume: Same<typeof declared.resumeLead, typeof module.resumeLead> = true;
export const read: Same<typeof declared.leadFromForm, typeof module.leadFromForm> = true;
export const attach: Same<typeof declared.attachForm, typeof module.attachForm> = true;

// What a page writes compiles against the declarations.
const form = document.querySelector("form")!;
const handle = declared.attachForm(form, { api: "https://leads.example.com", publishableKey: "pk_x", map: { email: "work_email" } });
handle.detach();
declared.submitLead({ publishableKey: "pk_x", lead: { email: "a@example.com", source: "website", fields: { budget: "10k" } }, captcha: () => "t", shownAt: Date.now() })
  .then((a: declared.Answer) => a.status === "received" || a.status === "completed");
// Attribution: off for a page, or given by the page itself.
declared.attachForm(form, { publishableKey: "pk_x", attribution: false });
const touch: declared.Touch = { landing_page: "https://acme.example/?utm_source=g", utm: { source: "g" }, click_ids: { gclid: "abc" }, at: new Date().toISOString() };
const attribution: declared.Attribution = { first: touch, last: { landing_page: "https://acme.example/contact", referrer: null } };
declared.submitLead({ publishableKey: "pk_x", attribution: true, lead: { email: "a@example.com", source: "website", attribution } });
// @ts-expect-error: a touch has no other member.
declared.submitLead({ publishableKey: "pk_x", lead: { email: "a@example.com", source: "website", attribution: { first: { page: "x" } } } });
// @ts-expect-error: nor click_ids.
const wrongID: declared.Touch = { click_ids: { ttclid: "x" } };
`

// The declarations against the module, with the TypeScript compiler from
// npm (the version sdk/package.json pins): TypeScript reads the module's
// types from its JSDoc, and every export must have the declared type. It
// needs npm and the registry: skipped without npm, except under CI=true.
func TestSDKDeclarationsTypeCheck(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no npm in CI: %v", err)
		}
		t.Skipf("no npm: %v", err)
	}
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(readFile(t, "sdk/package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	version := pkg.DevDependencies["typescript"]
	if version == "" {
		t.Fatal("sdk/package.json pins no typescript")
	}
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("package.json", []byte(`{"private": true, "type": "module"}`))
	write("leadintake.d.ts", readFile(t, "sdk/leadintake.d.ts"))
	write("src/leadintake.js", readFile(t, "sdk/leadintake.js"))
	write("compat.ts", []byte(compatCheck))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
	}
	run(npm, "install", "--no-save", "--ignore-scripts", "typescript@"+version)
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	lib := "es2022,dom,dom.iterable"
	run(tsc, "--allowJs", "--declaration", "--emitDeclarationOnly", "--target", "es2022", "--module", "es2022", "--lib", lib, "--outDir", "gen", "src/leadintake.js")
	run(tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "es2022", "--moduleResolution", "bundler", "--lib", lib, "leadintake.d.ts", "compat.ts")
}
