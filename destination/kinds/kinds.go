// Package kinds lists every destination kind leadintake is built with: the
// clients file is checked against it, and the worker builds its
// destinations from it.
package kinds

import (
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/email"
	"github.com/leadintake/leadintake/destination/generic"
	"github.com/leadintake/leadintake/destination/hubspot"
	"github.com/leadintake/leadintake/destination/pipedrive"
	"github.com/leadintake/leadintake/destination/salesforce"
	"github.com/leadintake/leadintake/destination/slack"
	"github.com/leadintake/leadintake/destination/teams"
)

// All is every kind, by name.
var All = []*destination.Spec{
	&generic.Spec,
	&hubspot.Spec,
	&pipedrive.Spec,
	&salesforce.Spec,
	&teams.Spec,
	&slack.Spec,
	&email.Spec,
}

// Lookup returns the kind named kind.
func Lookup(kind string) (*destination.Spec, bool) {
	for _, s := range All {
		if s.Kind == kind {
			return s, true
		}
	}
	return nil, false
}

// Names lists the kinds' names, in the order of All.
func Names() []string {
	out := make([]string, len(All))
	for i, s := range All {
		out[i] = s.Kind
	}
	return out
}
