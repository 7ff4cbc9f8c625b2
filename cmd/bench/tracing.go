package main

import (
	"strconv"

	"github.com/leadintake/leadintake/internal/otlpsink"
)

// traceEnv is added to the environment of every api and worker the bench
// starts (setTracing).
var traceEnv = []string{"OTEL_SDK_DISABLED=true"}

// setTracing makes the api and the worker export their traces at ratio to
// an OTLP receiver in this process that counts and discards them (none
// with ratio 0: tracing off, whatever the bench's own environment says).
// stop closes the receiver, once, and returns the spans received.
func setTracing(ratio float64) (stop func() int, err error) {
	if ratio == 0 {
		return func() int { return 0 }, nil
	}
	rcv, err := otlpsink.Start(true)
	if err != nil {
		return nil, err
	}
	traceEnv = []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.Endpoint(),
		"OTEL_TRACES_SAMPLER=parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG=" + strconv.FormatFloat(ratio, 'g', -1, 64),
		"OTEL_SDK_DISABLED=false",
	}
	spans, closed := 0, false
	return func() int {
		if !closed {
			closed = true
			spans, _ = rcv.Count()
			_ = rcv.Close()
		}
		return spans
	}, nil
}
