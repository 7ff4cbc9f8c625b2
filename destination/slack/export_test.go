package slack

import (
	"maps"
	"slices"
)

// DocumentedCodes are the error codes the kind classifies from Slack's
// pages, sorted.
func DocumentedCodes() []string { return slices.Sorted(maps.Keys(webAPICodes)) }

// SetHistoryPages makes Find read at most n pages until restore.
func SetHistoryPages(n int) (restore func()) {
	old := historyPages
	historyPages = n
	return func() { historyPages = old }
}
