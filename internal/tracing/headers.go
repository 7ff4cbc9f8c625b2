package tracing

import (
	"fmt"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// HeaderVariables are the variables that hold the headers of OTLP exports:
// every export's, the traces', the metrics'. Their values often hold a
// collector's API key.
var HeaderVariables = []string{
	"OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_METRICS_HEADERS",
}

// ValidateHeaders checks, from the environment as getenv reads it, that
// each of HeaderVariables that is set is a list of headers as the OTLP
// exporters read it: comma-separated key=value entries (W3C Baggage's
// form), each key a header name, each value percent-decoded a header
// value. The exporters report a malformed entry themselves, quoting it,
// which would print the API key it holds; so a malformed value is a
// configuration error of ours first, which names the variable and the
// entry's place, never a key or a value.
func ValidateHeaders(getenv func(string) string) error {
	for _, name := range HeaderVariables {
		value := getenv(name)
		if value == "" {
			continue
		}
		for i, entry := range strings.Split(value, ",") {
			if problem := headerProblem(entry); problem != "" {
				return fmt.Errorf("%s: entry %d of the comma-separated key=value headers %s (its value is not shown)", name, i+1, problem)
			}
		}
	}
	return nil
}

// headerProblem says what is wrong with one key=value entry ("" for
// nothing), as the exporters would take it: the key trimmed, the value
// percent-decoded and trimmed.
func headerProblem(entry string) string {
	key, value, ok := strings.Cut(entry, "=")
	if !ok {
		return "has no '='"
	}
	if key = strings.TrimSpace(key); key == "" || !httpguts.ValidHeaderFieldName(key) {
		return "has no valid header name before its '='"
	}
	decoded, err := url.PathUnescape(value)
	if err != nil {
		return "has a value whose percent-encoding is malformed (a % must begin %XX)"
	}
	if !httpguts.ValidHeaderFieldValue(strings.TrimSpace(decoded)) {
		return "has a value that is no valid header value (control characters, once percent-decoded)"
	}
	return ""
}
