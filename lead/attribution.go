package lead

import (
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Attribution is where a lead came from: the first page a visitor landed
// on from a campaign, a click or another site, and the page of the form.
// It is personal data like utm: kept, erased and retained with the lead.
type Attribution struct {
	First *Touch `json:"first,omitempty"`
	Last  *Touch `json:"last,omitempty"`
}

// Touch is one visit's page, where it came from, its campaign and its
// click ids.
type Touch struct {
	LandingPage string            `json:"landing_page,omitempty"`
	Referrer    string            `json:"referrer,omitempty"`
	UTM         map[string]string `json:"utm,omitempty"`
	ClickIDs    map[string]string `json:"click_ids,omitempty"`
	At          string            `json:"at,omitempty"`
}

// Bounds of an attribution.
const (
	maxClickID = 512
)

// ClickIDNames are the click ids a touch may carry.
var ClickIDNames = []string{"fbclid", "gclid", "msclkid"}

var touchMembers = []string{"at", "click_ids", "landing_page", "referrer", "utm"}

// rfc3339 is the syntax of RFC 3339's date-time, which time.Parse
// stretches (a comma before the fraction, an offset of 24 hours): what the
// API description's pattern says too. time.Parse checks the ranges.
var rfc3339 = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// validateAttribution checks the attribution member: an object with first
// and last, each a touch. A member a touch or its click_ids does not know
// is reported as unknown (unknown_field); every other broken rule as a
// problem (validation_failed).
func validateAttribution(v *validator, raw jsontext.Value, l *Lead) {
	if raw.Kind() == 'n' {
		return
	}
	obj, ok := object(v, "attribution", raw)
	if !ok {
		return
	}
	a := &Attribution{}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		var t **Touch
		switch name {
		case "first":
			t = &a.First
		case "last":
			t = &a.Last
		default:
			v.unknownMember("attribution." + name)
			continue
		}
		*t = validateTouch(v, "attribution."+name, obj[name])
	}
	if a.First != nil || a.Last != nil {
		l.Attribution = a
	}
}

func validateTouch(v *validator, at string, raw jsontext.Value) *Touch {
	if raw.Kind() == 'n' {
		return nil
	}
	obj, ok := object(v, at, raw)
	if !ok {
		return nil
	}
	t := &Touch{}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		field, raw := at+"."+name, obj[name]
		if !slices.Contains(touchMembers, name) {
			v.unknownMember(field)
			continue
		}
		if raw.Kind() == 'n' {
			continue
		}
		switch name {
		case "landing_page", "referrer":
			if s, ok := v.str(field, raw, 0, maxWebsite); ok {
				if !isWebURL(s) {
					v.add(field, "must be an absolute http or https URL")
					continue
				}
				if name == "landing_page" {
					t.LandingPage = s
				} else {
					t.Referrer = s
				}
			}
		case "at":
			if s, ok := v.str(field, raw, 0, 64); ok {
				if _, err := time.Parse(time.RFC3339, s); err != nil || !rfc3339.MatchString(s) {
					v.add(field, "must be an RFC 3339 date and time")
					continue
				}
				t.At = s
			}
		case "utm":
			t.UTM = validateUTM(v, field, raw)
		case "click_ids":
			ids, ok := object(v, field, raw)
			if !ok {
				continue
			}
			for _, id := range slices.Sorted(maps.Keys(ids)) {
				if !slices.Contains(ClickIDNames, id) {
					v.unknownMember(field + "." + id)
					continue
				}
				if ids[id].Kind() == 'n' {
					continue
				}
				if s, ok := v.str(field+"."+id, ids[id], 0, maxClickID); ok && s != "" {
					if t.ClickIDs == nil {
						t.ClickIDs = map[string]string{}
					}
					t.ClickIDs[id] = s
				}
			}
		}
	}
	return t
}

// object decodes raw as a JSON object, adding "must be an object" to v
// when it is not one.
func object(v *validator, field string, raw jsontext.Value) (map[string]jsontext.Value, bool) {
	var obj map[string]jsontext.Value
	if raw.Kind() != '{' || json.Unmarshal(raw, &obj) != nil {
		v.add(field, "must be an object")
		return nil, false
	}
	return obj, true
}
