package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/webhook"
)

// b64 returns the standard base64 of the signature sig.
func b64(sig []byte) string { return base64.StdEncoding.EncodeToString(sig) }

func TestParseSignatureHeader(t *testing.T) {
	t.Parallel()

	const (
		specV1 = "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
		otherA = "K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="
		otherB = "Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
	)

	t.Run("Accepts", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name, value string
			want        []string
		}{
			{"One", "v1," + specV1, []string{specV1}},
			{"SpecExampleSkipsV1a", specHeaderExample, []string{otherA}},
			{"RotationInOrder", "v1," + otherA + " v1," + otherB, []string{otherA, otherB}},
			{"DoubledAndOuterSpaces", "  v1," + otherA + "   v1," + otherB + " ", []string{otherA, otherB}},
			{"SkipsOtherVersionsAndJunk", "v2," + otherA + " junk v1, v1,abc V1," + otherB + " ,, v1," + specV1, []string{specV1}},
			{"SkipsUnpadded", "v1," + strings.TrimRight(otherA, "=") + " v1," + otherB, []string{otherB}},
			{"SkipsURLAlphabet", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN_H_pI4= v1," + otherB, []string{otherB}},
			{"MaxSignatures", strings.Repeat("v1a,x ", webhook.MaxSignatures-1) + "v1," + specV1, []string{specV1}},
		} {
			sigs, err := webhook.ParseSignatureHeader(c.value)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			var got []string
			for _, s := range sigs {
				got = append(got, b64(s))
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s: got %q, want %q", c.name, got, c.want)
			}
		}
	})

	t.Run("Refuses", func(t *testing.T) {
		t.Parallel()
		// The last base64 character of a 32-byte value carries 2 unused
		// bits: "F" for "E" spells the same bytes, non-canonically.
		nonCanonical := strings.TrimSuffix(specV1, "E=") + "F="
		for name, value := range map[string]string{
			"Empty":            "",
			"Spaces":           "     ",
			"NoComma":          "v1" + specV1,
			"OnlyV1a":          "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
			"Short":            "v1,Y2Fr",
			"Long":             "v1," + specV1 + "AAAA",
			"NonCanonical":     "v1," + nonCanonical,
			"TabSeparated":     "v1," + otherA + "\tv1," + otherB,
			"NewlineInside":    "v1," + specV1[:20] + "\n" + specV1[21:],
			"CommaSeparated":   "v1," + otherA + ",v1," + otherB,
			"TooMany":          strings.Repeat("v1a,x ", webhook.MaxSignatures) + "v1," + specV1,
			"TooLong":          "v1," + specV1 + strings.Repeat(" ", webhook.MaxSignatureHeaderLen),
			"MegabyteOfCommas": strings.Repeat(",", 1<<20),
		} {
			sigs, err := webhook.ParseSignatureHeader(value)
			if !errors.Is(err, webhook.ErrSignature) || sigs != nil {
				t.Errorf("%s: %d signatures, %v; want none and ErrSignature", name, len(sigs), err)
			}
		}
	})
}

// FuzzParseSignatureHeader feeds the parser hostile headers: it must not
// panic, must keep to its bounds, and must read back exactly what Sign
// writes, alone or after other entries, and Verify must accept it.
func FuzzParseSignatureHeader(f *testing.F) {
	seeds := []string{
		"",
		" ",
		"v1," + "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		specHeaderExample,
		"v1,",
		"v1",
		",",
		"v1,,,,",
		"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3\r\nuFJELVlNIOLJ1OE=",
		"v1,g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE",
		"\x00v1,\xff\xfe",
		"v1,Ω" + strings.Repeat("A", 42),
		strings.Repeat("v1,A ", 20),
		strings.Repeat(" ", 5000),
		strings.Repeat("v1a,x ", webhook.MaxSignatures),
	}
	for i, seed := range seeds {
		f.Add(seed, specMsgID, int64(specUnix+i), []byte(specPayload))
	}
	f.Add("", "", int64(0), []byte(nil))
	f.Add("v1,x", "k.1.2", int64(-1), []byte("1.{}"))
	f.Add("v1,x", "a b,c", int64(253402300799), []byte{0xff, '.', 0})

	secret, err := webhook.ParseSecret(specSecret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header, id string, unix int64, body []byte) {
		sigs, err := webhook.ParseSignatureHeader(header)
		switch {
		case err != nil && (sigs != nil || !errors.Is(err, webhook.ErrSignature)):
			t.Fatalf("ParseSignatureHeader(%q) = %d signatures, %v", header, len(sigs), err)
		case err == nil && len(header) > webhook.MaxSignatureHeaderLen:
			t.Fatalf("accepted %d bytes, more than %d", len(header), webhook.MaxSignatureHeaderLen)
		case err == nil && (len(sigs) == 0 || len(sigs) > webhook.MaxSignatures):
			t.Fatalf("ParseSignatureHeader(%q): %d signatures", header, len(sigs))
		}
		for _, sig := range sigs {
			if len(sig) != 32 || !strings.Contains(header, "v1,"+b64(sig)) {
				t.Fatalf("ParseSignatureHeader(%q) found %q, not in it", header, b64(sig))
			}
		}

		ts := time.Unix(unix, 0)
		signature := webhook.Sign(secret, id, ts, body)
		got, err := webhook.ParseSignatureHeader(signature)
		if err != nil || len(got) != 1 || "v1,"+b64(got[0]) != signature {
			t.Fatalf("Sign gave %q; parsed back as %d signatures, %v", signature, len(got), err)
		}

		// After the fuzzed entries, Sign's signature is still found, as
		// long as the bounds leave room for it.
		combined := header + " " + signature
		entries := 0
		for e := range strings.SplitSeq(header, " ") {
			if e != "" {
				entries++
			}
		}
		if len(combined) <= webhook.MaxSignatureHeaderLen && entries < webhook.MaxSignatures {
			sigs, err := webhook.ParseSignatureHeader(combined)
			if err != nil || "v1,"+b64(sigs[len(sigs)-1]) != signature {
				t.Fatalf("%q after %q: not found (%v)", signature, header, err)
			}
			// And Verify accepts the message, when its headers could be
			// sent at all.
			if id != "" && unix >= 0 && unix <= 999999999999 {
				h := http.Header{}
				h.Set("webhook-id", id)
				h.Set("webhook-timestamp", strconv.FormatInt(unix, 10))
				h.Set("webhook-signature", combined)
				if got, err := webhook.Verify([]webhook.Secret{secret}, h, body, ts, 0); err != nil || got != id {
					t.Fatalf("Verify of a signed message = %q, %v", got, err)
				}
			}
		}
	})
}
