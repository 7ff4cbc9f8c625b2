package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/internal/service"
)

// `api -h` names every command once, in its first line and in the list,
// and lists each usage line once.
func TestHelpListsEveryCommandOnce(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"api", "-h"}, &out, io.Discard); err != nil {
		t.Fatalf("api -h: %v", err)
	}
	text := out.String()
	first, _, _ := strings.Cut(text, "\n")
	for _, cmd := range []string{"migrate", "erase", "keys", "leads", "spam"} {
		if !strings.Contains(first, cmd) {
			t.Errorf("api -h: the first line %q does not name %s", first, cmd)
		}
	}
	list, _, ok := strings.Cut(text, "\nEnvironment")
	if !ok {
		t.Fatalf("api -h: no Environment table:\n%s", text)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(list, "\n")[1:] {
		if line = strings.TrimSpace(line); line != "" {
			seen[line]++
		}
	}
	for line, n := range seen {
		if n > 1 {
			t.Errorf("api -h prints %q %d times", line, n)
		}
	}
	for _, usage := range []string{migrateUsage, eraseUsage, keysUsage, leadsUsage, spamUsage} {
		for _, line := range strings.Split(usage, "\n") {
			if seen[strings.TrimSpace(line)] != 1 {
				t.Errorf("api -h does not list %q once", strings.TrimSpace(line))
			}
		}
	}
}

// Every command answers -h with its usage on stdout, and exit status 0;
// `api migrate -h` with its environment too.
func TestEveryCommandTakesHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"migrate", "-h"}, []string{"api migrate", "DATABASE_URL", "LOG_FORMAT", "LOG_LEVEL"}},
		{[]string{"migrate", "--help"}, []string{"api migrate", "DATABASE_URL"}},
		{[]string{"erase", "-h"}, []string{"api erase --client ID --email ADDRESS"}},
		{[]string{"keys", "-h"}, []string{"api keys list", "api keys show", "api keys settle"}},
		{[]string{"keys", "show", "-h"}, []string{"api keys show"}},
		{[]string{"leads", "-h"}, []string{"api leads redrive --client ID KEY..."}},
		{[]string{"leads", "redrive", "-h"}, []string{"api leads redrive --outcome"}},
		{[]string{"spam", "-h"}, []string{"api spam list", "api spam show", "api spam release"}},
		{[]string{"spam", "release", "-h"}, []string{"api spam release"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"api"}, tc.args...), &out, io.Discard)
			if err != nil {
				t.Fatalf("api %s: %v", strings.Join(tc.args, " "), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("api %s printed no %q:\n%s", strings.Join(tc.args, " "), w, out.String())
				}
			}
		})
	}
}

// `api migrate` takes no other argument.
func TestMigrateRefusesArguments(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"api", "migrate", "now"}, io.Discard, io.Discard)
	var usage *service.UsageError
	if !errors.As(err, &usage) {
		t.Fatalf("api migrate now: %v, want a usage error", err)
	}
}
