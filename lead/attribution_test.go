package lead_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// withAttribution is validBody with an attribution member.
func withAttribution(attribution string) string {
	return strings.TrimSuffix(validBody, "}") + `,"attribution":` + attribution + `}`
}

// adTouch is a first touch with every member: a visitor who came from an
// ad.
const adTouch = `{"landing_page":"https://acme.example/landing?utm_source=google&gclid=abc123",` +
	`"referrer":"https://www.google.com/","utm":{"source":"google","medium":"cpc","campaign":"spring"},` +
	`"click_ids":{"gclid":"abc123","fbclid":"fb-1","msclkid":"ms-1"},"at":"2025-03-01T09:30:00.123Z"}`

// The body's attribution: a first and a last touch, each with an absolute
// http(s) landing page and referrer, utm, click ids and a time, every
// member optional.
func TestDecodeAttribution(t *testing.T) {
	t.Parallel()
	long := "https://acme.example/" + strings.Repeat("p", 2048-len("https://acme.example/"))
	id512 := strings.Repeat("x", 512)
	utm20 := make([]string, 20)
	want20 := map[string]string{}
	for i := range utm20 {
		utm20[i] = `"k` + strconv.Itoa(i) + `":"` + strings.Repeat("é", 200) + `"`
		want20["k"+strconv.Itoa(i)] = strings.Repeat("é", 200)
	}

	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		for body, want := range map[string]*lead.Attribution{
			withAttribution(`{"first":` + adTouch + `,"last":{"landing_page":"https://acme.example/contact","at":"2025-03-02T10:00:00+01:00"}}`): {
				First: &lead.Touch{
					LandingPage: "https://acme.example/landing?utm_source=google&gclid=abc123", Referrer: "https://www.google.com/",
					UTM:      map[string]string{"source": "google", "medium": "cpc", "campaign": "spring"},
					ClickIDs: map[string]string{"gclid": "abc123", "fbclid": "fb-1", "msclkid": "ms-1"}, At: "2025-03-01T09:30:00.123Z",
				},
				Last: &lead.Touch{LandingPage: "https://acme.example/contact", At: "2025-03-02T10:00:00+01:00"},
			},
			// Every member optional, a touch alone, null for not given.
			withAttribution(`{"last":{"referrer":"http://news.example/story"}}`): {Last: &lead.Touch{Referrer: "http://news.example/story"}},
			withAttribution(`{"first":{}}`):                                      {First: &lead.Touch{}},

			withAttribution(`{"first":{"landing_page":null,"referrer":null,"utm":null,"click_ids":null,"at":null},"last":null}`): {First: &lead.Touch{}},

			withAttribution(`{"first":{"click_ids":{"gclid":null,"fbclid":"f"}}}`): {First: &lead.Touch{ClickIDs: map[string]string{"fbclid": "f"}}},
			withAttribution(`{"first":{"click_ids":{"gclid":""}}}`):                {First: &lead.Touch{}},
			withAttribution(`{}`):                                          nil,
			withAttribution(`null`):                                        nil,
			withAttribution(`{"first":null,"last":null}`):                  nil,
			withAttribution(`{"last":{"utm":{}}}`):                         {Last: &lead.Touch{}},
			withAttribution(`{"last":{"at":"2025-03-02T10:00:00-05:30"}}`): {Last: &lead.Touch{At: "2025-03-02T10:00:00-05:30"}},
			// At the bounds: 2048 characters of URL, 512 of click id, 20 utm
			// members of 200 characters (code points, not bytes).
			withAttribution(`{"first":{"landing_page":"` + long + `","referrer":"` + long + `","click_ids":{"msclkid":"` + id512 + `"},"utm":{` + strings.Join(utm20, ",") + `}}}`): {
				First: &lead.Touch{LandingPage: long, Referrer: long, ClickIDs: map[string]string{"msclkid": id512}, UTM: want20},
			},
		} {
			sub := decode(t, body)
			if !reflect.DeepEqual(sub.Lead.Attribution, want) {
				t.Errorf("%.120s: attribution %s, want %s", body, show(sub.Lead.Attribution), show(want))
			}
			requireValidLead(t, sub.Lead)
		}
	})

	// A member the API does not know, of attribution, of a touch or of its
	// click_ids, is unknown_field, named by its path; a broken rule
	// besides does not hide it.
	t.Run("UnknownMembers", func(t *testing.T) {
		t.Parallel()
		for body, want := range map[string][]string{
			withAttribution(`{"middle":{}}`):                                                            {"attribution.middle"},
			withAttribution(`{"First":{}}`):                                                             {"attribution.First"},
			withAttribution(`{"first":{"page":"https://acme.example/"}}`):                               {"attribution.first.page"},
			withAttribution(`{"first":{"utm_source":"google"}}`):                                        {"attribution.first.utm_source"},
			withAttribution(`{"first":{"click_ids":{"ttclid":"x"}}}`):                                   {"attribution.first.click_ids.ttclid"},
			withAttribution(`{"last":{"click_ids":{"gclid":"g","ttclid":"x","dclid":null}}}`):           {"attribution.last.click_ids.dclid", "attribution.last.click_ids.ttclid"},
			withAttribution(`{"first":{"gclid":"g"},"last":{"landing_page":"not a url","x":1},"y":{}}`): {"attribution.first.gclid", "attribution.last.x", "attribution.y"},
		} {
			_, err := lead.Decode([]byte(body), decodeOpts)
			requireDetails(t, body, err, response.CodeUnknownField, want)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		utm21 := make([]string, 21)
		for i := range utm21 {
			utm21[i] = `"k` + strconv.Itoa(i) + `":"v"`
		}
		touch := func(member, value string) string {
			return withAttribution(`{"first":{"` + member + `":` + value + `}}`)
		}
		for body, want := range map[string][]string{
			// Not absolute http(s) URLs.
			touch("landing_page", `"ftp://acme.example/file"`):        {"attribution.first.landing_page"},
			touch("landing_page", `"/contact"`):                       {"attribution.first.landing_page"},
			touch("landing_page", `"acme.example/contact"`):           {"attribution.first.landing_page"},
			touch("landing_page", `""`):                               {"attribution.first.landing_page"},
			touch("landing_page", `"https://"`):                       {"attribution.first.landing_page"},
			touch("landing_page", `"https://a.example/\u0000"`):       {"attribution.first.landing_page"},
			touch("landing_page", `1`):                                {"attribution.first.landing_page"},
			touch("referrer", `"javascript:alert(1)"`):                {"attribution.first.referrer"},
			touch("referrer", `"android-app://com.example.app/"`):     {"attribution.first.referrer"},
			touch("landing_page", `"`+long+`x"`):                      {"attribution.first.landing_page"},
			touch("referrer", `"`+long+`x"`):                          {"attribution.first.referrer"},
			touch("click_ids", `{"gclid":"`+id512+`x"}`):              {"attribution.first.click_ids.gclid"},
			touch("click_ids", `{"fbclid":1}`):                        {"attribution.first.click_ids.fbclid"},
			touch("click_ids", `"abc123"`):                            {"attribution.first.click_ids"},
			touch("click_ids", `["abc123"]`):                          {"attribution.first.click_ids"},
			touch("at", `"yesterday"`):                                {"attribution.first.at"},
			touch("at", `"2025-03-01"`):                               {"attribution.first.at"},
			touch("at", `"2025-03-01 10:00:00Z"`):                     {"attribution.first.at"},
			touch("at", `"2025-03-01T10:00:00"`):                      {"attribution.first.at"},
			touch("at", `"2025-13-01T10:00:00Z"`):                     {"attribution.first.at"},
			touch("at", `"2025-02-30T10:00:00Z"`):                     {"attribution.first.at"},
			touch("at", `"2025-03-01T24:00:00Z"`):                     {"attribution.first.at"},
			touch("at", `"2025-03-01T10:00:00,5Z"`):                   {"attribution.first.at"},
			touch("at", `"2025-03-01t10:00:00z"`):                     {"attribution.first.at"},
			touch("at", `"2025-03-01T10:00:00+24:00"`):                {"attribution.first.at"},
			touch("at", `""`):                                         {"attribution.first.at"},
			touch("at", `1740820000`):                                 {"attribution.first.at"},
			touch("utm", `{`+strings.Join(utm21, ",")+`}`):            {"attribution.first.utm"},
			touch("utm", `{"source":"`+strings.Repeat("é", 201)+`"}`): {"attribution.first.utm.source"},
			touch("utm", `{"source":1}`):                              {"attribution.first.utm.source"},
			touch("utm", `"google"`):                                  {"attribution.first.utm"},
			// A touch, or the attribution, that is not an object.
			withAttribution(`{"first":"https://acme.example/"}`): {"attribution.first"},
			withAttribution(`{"last":[]}`):                       {"attribution.last"},
			withAttribution(`{"first":1,"last":true}`):           {"attribution.first", "attribution.last"},
			withAttribution(`"https://acme.example/"`):           {"attribution"},
			withAttribution(`[]`):                                {"attribution"},
			// Every broken rule is named.
			withAttribution(`{"first":{"landing_page":"x","at":"y"},"last":{"click_ids":{"gclid":1}}}`): {
				"attribution.first.at", "attribution.first.landing_page", "attribution.last.click_ids.gclid",
			},
		} {
			_, err := lead.Decode([]byte(body), decodeOpts)
			requireDetails(t, body, err, response.CodeValidationFailed, want)
		}
	})

	// The attribution is part of the body, so of its fingerprint: a retry
	// must send it as it was; its members in another order are the same.
	t.Run("Fingerprint", func(t *testing.T) {
		t.Parallel()
		base := decode(t, withAttribution(`{"first":`+adTouch+`,"last":{"landing_page":"https://acme.example/contact"}}`))
		reordered := withAttribution(`{"last":{"landing_page":"https:\/\/acme.example\/contact"},"first":{"at":"2025-03-01T09:30:00.123Z",` +
			`"click_ids":{"msclkid":"ms-1","fbclid":"fb-1","gclid":"abc123"},"utm":{"campaign":"spring","medium":"cpc","source":"google"},` +
			`"referrer":"https://www.google.com/","landing_page":"https://acme.example/landing?utm_source=google&gclid=abc123"}}`)
		if decode(t, reordered).Fingerprint != base.Fingerprint {
			t.Error("the same attribution in another order: another fingerprint")
		}
		for _, other := range []string{
			withAttribution(`{"first":` + adTouch + `,"last":{"landing_page":"https://acme.example/contact","at":"2025-03-02T10:00:00Z"}}`),
			withAttribution(`{"first":` + adTouch + `}`),
			withAttribution(`{"last":` + adTouch + `,"first":{"landing_page":"https://acme.example/contact"}}`),
			validBody,
		} {
			if decode(t, other).Fingerprint == base.Fingerprint {
				t.Errorf("%.120s has the fingerprint of another enquiry", other)
			}
		}
	})

	// What the worker reads back from the stored canonical form, and the
	// destinations send on: the attribution as it was given.
	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		sub := decode(t, withAttribution(`{"first":`+adTouch+`,"last":{"landing_page":"https://acme.example/contact"}}`))
		var back lead.Lead
		if err := json.Unmarshal(sub.Canonical, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, sub.Lead) {
			t.Fatalf("the canonical form reads back as %+v, want %+v", back, sub.Lead)
		}
		out, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"attribution":{"first":{"landing_page":"https://acme.example/landing?utm_source=google\u0026gclid=abc123",`) ||
			!strings.Contains(string(out), `"last":{"landing_page":"https://acme.example/contact"}}`) {
			t.Errorf("the lead marshals as %s", out)
		}
		if out, _ := json.Marshal(decode(t, validBody).Lead); strings.Contains(string(out), "attribution") {
			t.Errorf("a lead without attribution marshals as %s", out)
		}
	})
}

// A body with thousands of broken members inside its attribution is
// answered as any other: at most response.MaxDetails details, the first
// in member order, and a message that says the list is cut.
func TestDecodeAttributionCapsDetails(t *testing.T) {
	t.Parallel()
	var unknown, ids, utm []string
	for i := range 3000 {
		unknown = append(unknown, fmt.Sprintf(`"m%04d":0`, i))
		ids = append(ids, fmt.Sprintf(`"id%04d":"x"`, i))
		utm = append(utm, fmt.Sprintf(`"u%04d":1`, i))
	}
	for name, tt := range map[string]struct {
		body  string
		code  response.Code
		first string
	}{
		"UnknownTouchMembers": {withAttribution(`{"first":{` + strings.Join(unknown, ",") + `}}`), response.CodeUnknownField, "attribution.first.m0000"},
		"UnknownClickIDs":     {withAttribution(`{"last":{"click_ids":{` + strings.Join(ids, ",") + `}}}`), response.CodeUnknownField, "attribution.last.click_ids.id0000"},
		"UnknownInBoth": {withAttribution(`{"first":{` + strings.Join(unknown[:15], ",") + `},"last":{` + strings.Join(unknown[15:30], ",") + `}}`),
			response.CodeUnknownField, "attribution.first.m0000"},
		"BrokenUTM": {withAttribution(`{"first":{"utm":{` + strings.Join(utm, ",") + `}}}`), response.CodeValidationFailed, "attribution.first.utm"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := lead.Decode([]byte(tt.body), decodeOpts)
			var apiErr *response.Error
			if !errors.As(err, &apiErr) || apiErr.Code != tt.code {
				t.Fatalf("decode: %v, want %s", err, tt.code)
			}
			if len(apiErr.Details) != response.MaxDetails {
				t.Fatalf("%d details, want %d", len(apiErr.Details), response.MaxDetails)
			}
			if apiErr.Details[0].Field != tt.first {
				t.Errorf("the first detail names %q, want %q", apiErr.Details[0].Field, tt.first)
			}
			if !strings.Contains(apiErr.Message, "first 20") {
				t.Errorf("message %q does not say the details are the first 20", apiErr.Message)
			}
		})
	}

	// Within the cap the list is whole, and the message plain.
	_, err := lead.Decode([]byte(withAttribution(`{"first":{"a":1},"last":{"b":2}}`)), decodeOpts)
	var apiErr *response.Error
	if !errors.As(err, &apiErr) || len(apiErr.Details) != 2 || strings.Contains(apiErr.Message, "first") {
		t.Errorf("two unknown members: %v %+v", err, apiErr)
	}
}

// requireDetails checks that err is a response.Error of code whose details
// name exactly the fields want (in any order), each with a problem.
func requireDetails(t *testing.T, body string, err error, code response.Code, want []string) {
	t.Helper()
	var apiErr *response.Error
	if !errors.As(err, &apiErr) || apiErr.Code != code {
		t.Errorf("%.120s: %v, want %s", body, err, code)
		return
	}
	var got []string
	for _, d := range apiErr.Details {
		got = append(got, d.Field)
		if d.Problem == "" {
			t.Errorf("%.120s: detail %q without a problem", body, d.Field)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%.120s: details name %q, want %q", body, got, want)
	}
}

// show writes an attribution for a failure message.
func show(a *lead.Attribution) string {
	b, _ := json.Marshal(a)
	return string(b)
}

// requireValidTouch checks an accepted touch against the contract's rules,
// written out independently of the code.
func requireValidTouch(t *testing.T, touch *lead.Touch) {
	t.Helper()
	if touch == nil {
		return
	}
	for _, u := range []string{touch.LandingPage, touch.Referrer} {
		if u != "" && (utf8.RuneCountInString(u) > 2048 || !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://")) {
			t.Fatalf("accepted the touch URL %q", u)
		}
	}
	if _, err := time.Parse(time.RFC3339, touch.At); touch.At != "" && err != nil {
		t.Fatalf("accepted the touch time %q", touch.At)
	}
	if len(touch.UTM) > 20 {
		t.Fatalf("accepted a touch of %d utm", len(touch.UTM))
	}
	for name, value := range touch.UTM {
		if utf8.RuneCountInString(value) > 200 {
			t.Fatalf("accepted the touch's utm %q of %d characters", name, utf8.RuneCountInString(value))
		}
	}
	for name, value := range touch.ClickIDs {
		if !slices.Contains([]string{"gclid", "fbclid", "msclkid"}, name) || value == "" || utf8.RuneCountInString(value) > 512 {
			t.Fatalf("accepted the click id %s of %d characters", name, utf8.RuneCountInString(value))
		}
	}
}
