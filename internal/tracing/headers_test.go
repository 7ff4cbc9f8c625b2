package tracing

import (
	"strings"
	"testing"
)

func TestValidateHeaders(t *testing.T) {
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"unset", "", true},
		{"one", "api-key=S3cret-value", true},
		{"several, spaced, encoded", " Authorization = Basic%20S3cret-value , x-tenant=sales", true},
		{"an empty value", "x-empty=", true},
		{"no '='", "Authorization: Bearer S3cret-value", false},
		{"a trailing comma", "api-key=S3cret-value,", false},
		{"no name", "=S3cret-value", false},
		{"a space in the name", "api key=S3cret-value", false},
		{"a malformed escape", "api-key=S3cret%-value", false},
		{"a line break, decoded", "api-key=S3cret-value%0D%0AX-Evil:%201", false},
		{"a NUL, decoded", "api-key=S3cret-value%00", false},
	} {
		for _, variable := range HeaderVariables {
			t.Run(c.name+"/"+variable, func(t *testing.T) {
				err := ValidateHeaders(env(variable, c.value))
				if (err == nil) != c.ok {
					t.Fatalf("ValidateHeaders(%s=%q) = %v, want ok %v", variable, c.value, err, c.ok)
				}
				if err == nil {
					return
				}
				msg := err.Error()
				if !strings.HasPrefix(msg, variable+": ") || strings.Contains(msg, "\n") {
					t.Errorf("error %q: want one line naming %s first", msg, variable)
				}
				for _, part := range []string{"S3cret", "Authorization", "Bearer", "api", "Evil"} {
					if strings.Contains(msg, part) {
						t.Errorf("error %q shows %q of the value", msg, part)
					}
				}
			})
		}
	}
}

// Setup refuses malformed headers itself, before an exporter reads them.
func TestSetupRefusesMalformedHeaders(t *testing.T) {
	resetGlobal(t)
	_, enabled, err := Setup(t.Context(), "leadintake-test", Options{Getenv: env(
		"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer S3cret-value")})
	if err == nil || enabled || strings.Contains(err.Error(), "S3cret") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Fatalf("Setup: enabled %v, err %v", enabled, err)
	}
}
