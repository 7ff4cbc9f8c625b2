package slack

import (
	"strings"
	"testing"
	"unicode/utf16"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in        string
		multiline bool
		want      string
	}{
		{"Ada\r\nLovelace", false, "Ada Lovelace"},
		{"Ada\rLovelace\u2028x", false, "Ada Lovelace x"},
		{"a\r\nb\n\n\n\n\nc", true, "a\nb\n\nc"},
		{"\u202egnp.exe\u202c \u2066x\u2069 \u200fy", false, "gnp.exe x y"},
		{"nul\x00bell\x07del\x7f\tend", false, "nulbelldel end"},
		{"bad \xff utf8", false, "bad \uFFFD utf8"},
		{"  family 👩‍👩‍👧 emoji ", false, "family 👩‍👩‍👧 emoji"},
	} {
		if got := clean(tc.in, tc.multiline); got != tc.want {
			t.Errorf("clean(%q, %v) = %q, want %q", tc.in, tc.multiline, got, tc.want)
		}
	}
}

func TestEscape(t *testing.T) {
	if got := escape("<!channel> & <@U1|x> &amp;"); got != "&lt;!channel&gt; &amp; &lt;@U1|x&gt; &amp;amp;" {
		t.Errorf("escape = %q", got)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"longer than ten", 10, "longer th…"},
		// Never an entity cut in two.
		{"abcdef&amp;gh", 10, "abcdef…"},
		{"abcde&lt;", 8, "abcde…"},
		// Never a surrogate pair: 𝒳 is two UTF-16 units.
		{"𝒳𝒳𝒳𝒳", 6, "𝒳𝒳…"},
		{"𝒳𝒳𝒳𝒳", 4, "𝒳…"},
	} {
		got := cut(tc.in, tc.max)
		if got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
		if n := len(utf16.Encode([]rune(got))); n > tc.max {
			t.Errorf("cut(%q, %d) is %d units long", tc.in, tc.max, n)
		}
	}
	long := escape(strings.Repeat("<&>", 2000))
	if got := cut(long, messageShare); units(got) > messageShare || !strings.HasSuffix(got, ";…") {
		t.Errorf("cut to %d units: %d, ends %q", messageShare, units(got), got[len(got)-12:])
	}
}
