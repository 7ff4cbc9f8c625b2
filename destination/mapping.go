package destination

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Mapping is a CRM destination's map: vendor fields written from the lead's
// members, besides the kind's standard fields. Its entries are sorted by
// field.
type Mapping []MapEntry

// MapEntry is one vendor field and where its value comes from: Source, a
// lead member (see ParseMapping), or Const, a constant written "=text".
type MapEntry struct {
	Field  string
	Source string
	Const  string
}

// The sources a map may name: the lead's members, and those under a
// prefix.
var (
	plainSources = map[string]bool{
		"email": true, "name": true, "first_name": true, "last_name": true, "company": true, "phone": true,
		"website": true, "message": true, "source": true, "score": true, "tier": true, "lead_id": true,
		"external_ref": true, "owner": true,
	}
	enrichmentSources = map[string]bool{"company_size": true, "industry": true, "seniority": true, "country": true}
	touchSources      = map[string]bool{"landing_page": true, "referrer": true, "at": true}
	clickIDs          = map[string]bool{"gclid": true, "fbclid": true, "msclkid": true}
	memberName        = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	fieldName         = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
)

// ParseMapping reads a map, {vendor_field: source}: source is a lead member
// (email, name, first_name, last_name, company, phone, website, message,
// source, score, tier, lead_id, external_ref, owner, utm.<x>, fields.<x>,
// attribution.first.<x> and attribution.last.<x> (x: landing_page,
// referrer, at, utm.<y>, click_ids.<gclid|fbclid|msclkid>),
// enrichment.<company_size|industry|seniority|country>) or a constant
// written =text. Errors name the field, never a value.
func ParseMapping(m map[string]string) (Mapping, error) {
	out := make(Mapping, 0, len(m))
	for field, src := range m {
		if !fieldName.MatchString(field) {
			return nil, errors.New("map: a field name must be 1 to 128 characters of A-Z a-z 0-9 _ . : -")
		}
		if c, ok := strings.CutPrefix(src, "="); ok {
			out = append(out, MapEntry{Field: field, Const: c})
			continue
		}
		if err := checkSource(src); err != nil {
			return nil, fmt.Errorf("map: %s: %w", field, err)
		}
		out = append(out, MapEntry{Field: field, Source: src})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out, nil
}

func checkSource(src string) error {
	unknown := fmt.Errorf("unknown source %q", src)
	if plainSources[src] {
		return nil
	}
	head, rest, ok := strings.Cut(src, ".")
	if !ok {
		return unknown
	}
	switch head {
	case "utm", "fields":
		if memberName.MatchString(rest) {
			return nil
		}
	case "enrichment":
		if enrichmentSources[rest] {
			return nil
		}
	case "attribution":
		touch, member, ok := strings.Cut(rest, ".")
		if !ok || (touch != "first" && touch != "last") {
			return unknown
		}
		if touchSources[member] {
			return nil
		}
		if k, ok := strings.CutPrefix(member, "utm."); ok && memberName.MatchString(k) {
			return nil
		}
		if k, ok := strings.CutPrefix(member, "click_ids."); ok && clickIDs[k] {
			return nil
		}
	}
	return unknown
}

// Values returns the map's fields for r: a source without a value is left
// out; score and enrichment.company_size are numbers, the rest strings.
func (m Mapping) Values(r *Record) map[string]any {
	out := make(map[string]any, len(m))
	for _, e := range m {
		if e.Source == "" {
			out[e.Field] = e.Const
			continue
		}
		if v, ok := r.source(e.Source); ok {
			out[e.Field] = v
		}
	}
	return out
}

// source is the value of a map's source for r, and whether it has one.
func (r *Record) source(src string) (any, bool) {
	l := r.Lead
	str := func(s string) (any, bool) { return s, s != "" }
	switch src {
	case "email":
		return str(l.Email)
	case "name":
		return str(l.Name)
	case "first_name":
		return str(r.FirstName())
	case "last_name":
		return str(r.LastName())
	case "company":
		return str(l.Company)
	case "phone":
		return str(l.Phone)
	case "website":
		return str(l.Website)
	case "message":
		return str(l.Message)
	case "source":
		return str(l.Source)
	case "score":
		return r.Score, true
	case "tier":
		return str(r.Tier)
	case "lead_id":
		return str(r.LeadID)
	case "external_ref":
		return str(r.ExternalRef)
	case "owner":
		if r.Owner == nil {
			return nil, false
		}
		return str(r.Owner.Name)
	}
	head, rest, _ := strings.Cut(src, ".")
	switch head {
	case "utm":
		return str(l.UTM[rest])
	case "fields":
		return str(l.Fields[rest])
	case "enrichment":
		e := r.Enrichment
		if e == nil {
			return nil, false
		}
		switch rest {
		case "company_size":
			if e.CompanySize != nil {
				return *e.CompanySize, true
			}
		case "industry":
			return strPtr(e.Industry)
		case "seniority":
			return strPtr(e.Seniority)
		case "country":
			return strPtr(e.Country)
		}
	case "attribution":
		return r.attribution(rest)
	}
	return nil, false
}

func strPtr(p *string) (any, bool) {
	if p == nil || *p == "" {
		return nil, false
	}
	return *p, true
}

// attribution is the value of attribution.<path> for r: path is
// first.<x> or last.<x>, x being landing_page, referrer, at, utm.<y> or
// click_ids.<y>.
func (r *Record) attribution(path string) (any, bool) {
	a := r.Lead.Attribution
	if a == nil {
		return nil, false
	}
	which, member, _ := strings.Cut(path, ".")
	t := a.First
	if which == "last" {
		t = a.Last
	}
	if t == nil {
		return nil, false
	}
	str := func(s string) (any, bool) { return s, s != "" }
	switch member {
	case "landing_page":
		return str(t.LandingPage)
	case "referrer":
		return str(t.Referrer)
	case "at":
		return str(t.At)
	}
	if k, ok := strings.CutPrefix(member, "utm."); ok {
		return str(t.UTM[k])
	}
	if k, ok := strings.CutPrefix(member, "click_ids."); ok {
		return str(t.ClickIDs[k])
	}
	return nil, false
}
