package service

import (
	"os"
	"strings"
	"testing"
	"time"
)

// testConfig is a configuration like the binaries', under names no
// environment sets.
type testConfig struct {
	Secret  string        `envconfig:"SVCTEST_SECRET" required:"true" desc:"a secret"`
	Timeout time.Duration `envconfig:"SVCTEST_TIMEOUT" default:"5s" desc:"a duration"`
	Count   int           `envconfig:"SVCTEST_COUNT" default:"3" desc:"a number"`
	List    []string      `envconfig:"SVCTEST_LIST" default:"a,b" desc:"a list; empty for none"`
	Flag    bool          `envconfig:"SVCTEST_FLAG" default:"false" desc:"a flag"`
	Embedded
}

type Embedded struct {
	Name string `envconfig:"SVCTEST_NAME" desc:"from an embedded struct"`
}

// The tests set variables of the process (envconfig reads nothing else):
// none of them is parallel.

func TestConfigUnsetTakesTheDefaultEmptyIsEmpty(t *testing.T) {
	t.Setenv("SVCTEST_SECRET", "s")
	var cfg testConfig
	if err := Config(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 5*time.Second || cfg.Count != 3 || len(cfg.List) != 2 || cfg.Flag {
		t.Fatalf("defaults: %+v", cfg)
	}
	t.Setenv("SVCTEST_LIST", "")
	t.Setenv("SVCTEST_NAME", "n")
	cfg = testConfig{}
	if err := Config(&cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.List) != 0 || cfg.Name != "n" {
		t.Fatalf("SVCTEST_LIST set to nothing: %q, want empty; embedded: %q", cfg.List, cfg.Name)
	}
}

// Errors name the variable in one line and never show its value.
func TestConfigErrorsNameTheVariableNotTheValue(t *testing.T) {
	for _, tt := range []struct {
		name  string
		env   map[string]string
		want  string
		value string // must not be shown
	}{
		{"Missing", map[string]string{}, "SVCTEST_SECRET is required", ""},
		{"EmptyRequired", map[string]string{"SVCTEST_SECRET": ""}, "SVCTEST_SECRET is required, and is set but empty", ""},
		{"BadDuration", map[string]string{"SVCTEST_SECRET": "s", "SVCTEST_TIMEOUT": "tok-Zq81xVb0"}, "SVCTEST_TIMEOUT: not a valid Duration", "tok-Zq81xVb0"},
		{"BadInteger", map[string]string{"SVCTEST_SECRET": "s", "SVCTEST_COUNT": "tok-Zq81xVb0"}, "SVCTEST_COUNT: not a valid Integer", "tok-Zq81xVb0"},
		{"BadBool", map[string]string{"SVCTEST_SECRET": "s", "SVCTEST_FLAG": "tok-Zq81xVb0"}, "SVCTEST_FLAG: not a valid True or False", "tok-Zq81xVb0"},
		{"EmptyDuration", map[string]string{"SVCTEST_SECRET": "s", "SVCTEST_TIMEOUT": ""}, "SVCTEST_TIMEOUT is set but empty, which is not a valid Duration (unset, it takes its default, 5s)", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := tt.env["SVCTEST_SECRET"]; !ok {
				// Set, so that t.Setenv restores it, then unset.
				t.Setenv("SVCTEST_SECRET", "")
				unsetenv(t, "SVCTEST_SECRET")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var cfg testConfig
			err := Config(&cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
			if tt.value != "" && strings.Contains(err.Error(), tt.value) {
				t.Errorf("error %q shows the value", err)
			}
		})
	}
}

// A field without an envconfig tag would be read by envconfig under a name
// of its own making (TOKEN): such a spec is refused.
func TestConfigRefusesAnUntaggedField(t *testing.T) {
	var spec struct {
		Addr  string `envconfig:"SVCTEST_ADDR"`
		Token string
	}
	if err := Config(&spec); err == nil || !strings.Contains(err.Error(), "Token has no envconfig tag") {
		t.Fatalf("Config: %v, want the untagged field named", err)
	}
}

func TestUsageTable(t *testing.T) {
	var out strings.Builder
	if err := Usage(&out, "Usage: test\n\n", &testConfig{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != "Usage: test" || !strings.HasPrefix(lines[2], "KEY ") {
		t.Fatalf("usage:\n%s", out.String())
	}
	for _, want := range [][]string{
		{"KEY", "TYPE", "DEFAULT", "REQUIRED", "DESCRIPTION"},
		{"SVCTEST_SECRET", "String", "true", "a", "secret"},
		{"SVCTEST_TIMEOUT", "Duration", "5s", "a", "duration"},
		{"SVCTEST_LIST", "Comma-separated", "list", "of", "String", "a,b", "a", "list;", "empty", "for", "none"},
		{"SVCTEST_FLAG", "True", "or", "False", "false", "a", "flag"},
		{"SVCTEST_NAME", "String", "from", "an", "embedded", "struct"},
	} {
		found := false
		for _, l := range lines[2:] {
			if strings.Join(strings.Fields(l), " ") == strings.Join(want, " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no row %q in:\n%s", strings.Join(want, " "), out.String())
		}
	}
}

func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
