package lead_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// withFields is validBody with a fields member.
func withFields(fields string) string {
	return strings.TrimSuffix(validBody, "}") + `,"fields":` + fields + `}`
}

// The form's own questions: an object of string to string, with names of
// a-z 0-9 _ and values of at most 1000 characters.
func TestDecodeFields(t *testing.T) {
	t.Parallel()

	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("é", 1000) // 1000 characters, 2000 bytes
		many := make([]string, 50)
		for i := range many {
			many[i] = `"q` + strconv.Itoa(i) + `":"a"`
		}
		for body, want := range map[string]map[string]string{
			withFields(`{"budget":"10k-50k","team_size":"11-50"}`): {"budget": "10k-50k", "team_size": "11-50"},
			withFields(`{"a":""}`):                                 {"a": ""},
			withFields(`{"` + strings.Repeat("z", 64) + `":"x"}`):  {strings.Repeat("z", 64): "x"},
			withFields(`{"q_1":"` + long + `"}`):                   {"q_1": long},
			withFields(`{"n":"line one\nline \"two\""}`):           {"n": "line one\nline \"two\""},
			withFields(`{}`):                                       nil,
			withFields(`null`):                                     nil,
			withFields(`{` + strings.Join(many, ",") + `}`): func() map[string]string {
				m := map[string]string{}
				for i := range 50 {
					m["q"+strconv.Itoa(i)] = "a"
				}
				return m
			}(),
		} {
			sub := decode(t, body)
			if !reflect.DeepEqual(sub.Lead.Fields, want) {
				t.Errorf("%.80s: fields %v, want %v", body, sub.Lead.Fields, want)
			}
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		many := make([]string, 51)
		for i := range many {
			many[i] = `"q` + strconv.Itoa(i) + `":"a"`
		}
		for body, want := range map[string][]string{
			withFields(`"budget"`):                                  {"fields"},
			withFields(`["budget"]`):                                {"fields"},
			withFields(`1`):                                         {"fields"},
			withFields(`true`):                                      {"fields"},
			withFields(`{"budget":10}`):                             {"fields.budget"},
			withFields(`{"budget":null}`):                           {"fields.budget"},
			withFields(`{"budget":{"min":1}}`):                      {"fields.budget"},
			withFields(`{"Budget":"x"}`):                            {"fields.Budget"},
			withFields(`{"team size":"x"}`):                         {"fields.team size"},
			withFields(`{"team-size":"x"}`):                         {"fields.team-size"},
			withFields(`{"é":"x"}`):                                 {"fields.é"},
			withFields(`{"":"x"}`):                                  {"fields."},
			withFields(`{"` + strings.Repeat("z", 65) + `":"x"}`):   {"fields." + strings.Repeat("z", 65)},
			withFields(`{"q":"` + strings.Repeat("é", 1001) + `"}`): {"fields.q"},
			withFields(`{"q":"a\u0000b"}`):                          {"fields.q"},
			withFields(`{` + strings.Join(many, ",") + `}`):         {"fields"},
			withFields(`{"ok":"x","bad":1,"Worse":"y"}`):            {"fields.Worse", "fields.bad"},
		} {
			_, err := lead.Decode([]byte(body), decodeOpts)
			var apiErr *response.Error
			if !errors.As(err, &apiErr) || apiErr.Code != response.CodeValidationFailed {
				t.Errorf("%.80s: %v, want validation_failed", body, err)
				continue
			}
			var got []string
			for _, d := range apiErr.Details {
				got = append(got, d.Field)
				if d.Problem == "" {
					t.Errorf("%.80s: detail %q without a problem", body, d.Field)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%.80s: details name %q, want %q", body, got, want)
			}
		}
	})

	// The fields are part of the body, so of its fingerprint: the same
	// answers in another order are the same enquiry, another answer is
	// another.
	t.Run("Fingerprint", func(t *testing.T) {
		t.Parallel()
		base := decode(t, withFields(`{"budget":"10k","team_size":"5"}`))
		if again := decode(t, withFields(` { "team_size" : "5", "budget":"1\u0030k"}`)); again.Fingerprint != base.Fingerprint {
			t.Error("the same fields in another order, escaped otherwise: another fingerprint")
		}
		for _, other := range []string{
			withFields(`{"budget":"10k","team_size":"6"}`),
			withFields(`{"budget":"10k"}`),
			withFields(`{"budget":"10k","team_size":"5","x":""}`),
			withFields(`{"budget":"10k","team_sizes":"5"}`),
			validBody,
		} {
			if decode(t, other).Fingerprint == base.Fingerprint {
				t.Errorf("%s has the fingerprint of another enquiry", other)
			}
		}
	})

	// What the worker reads back from the stored canonical form, and
	// sends on inside the lead: the fields as an object.
	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		sub := decode(t, withFields(`{"budget":"10k","team_size":"5"}`))
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
		if !strings.Contains(string(out), `"fields":{"budget":"10k","team_size":"5"}`) {
			t.Errorf("the lead marshals as %s, without its fields as an object", out)
		}
		if out, _ := json.Marshal(decode(t, validBody).Lead); strings.Contains(string(out), "fields") {
			t.Errorf("a lead without fields marshals as %s", out)
		}
	})
}
