package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The sample is the results file of a smoke run of `bench scale` (two
// small steps and a clean-up of 150 thousand keys, on a busy machine).
const sampleScale = "testdata/bench-scale-smoke.json"

func readSample(t *testing.T) *scaleResults {
	t.Helper()
	b, err := os.ReadFile(sampleScale)
	if err != nil {
		t.Fatal(err)
	}
	var r scaleResults
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// decodePNG decodes b whole and returns its size.
func decodePNG(t *testing.T, b []byte) image.Point {
	t.Helper()
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || format != "png" {
		t.Fatalf("DecodeConfig: format %q, %v", format, err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("png.Decode: %v", err)
	}
	if got := img.Bounds().Size(); got != (image.Point{X: cfg.Width, Y: cfg.Height}) {
		t.Fatalf("decoded %v, header says %dx%d", got, cfg.Width, cfg.Height)
	}
	return img.Bounds().Size()
}

func TestRenderScale(t *testing.T) {
	t.Parallel()

	t.Run("StepsAndCleanUp", func(t *testing.T) {
		t.Parallel()
		b, err := renderScale(readSample(t), 900, 400)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodePNG(t, b); got != (image.Point{X: 900, Y: 400}) {
			t.Errorf("size %v, want 900x400", got)
		}
	})

	t.Run("OneStepWithoutCleanUp", func(t *testing.T) {
		t.Parallel()
		r := readSample(t)
		r.Steps, r.Cleanup = r.Steps[:1], nil
		b, err := renderScale(r, 640, 480)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodePNG(t, b); got != (image.Point{X: 640, Y: 480}) {
			t.Errorf("size %v, want 640x480", got)
		}
	})

	t.Run("NoStep", func(t *testing.T) {
		t.Parallel()
		if _, err := renderScale(&scaleResults{}, 640, 480); err == nil {
			t.Error("no error for results without a step")
		}
	})
}

func TestRunPlotWritesThePNG(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "docs", "bench-scale.png")
	if err := runPlot([]string{"-in", sampleScale, "-out", out, "-width", "1400", "-height", "560"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodePNG(t, b); got != (image.Point{X: 1400, Y: 560}) {
		t.Errorf("size %v, want 1400x560", got)
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{100: "100", 1000: "1k", 10000: "10k", 1e6: "1M", 1e7: "10M", 2.5e6: "2.5M"} {
		if got := human(v); got != want {
			t.Errorf("human(%g) = %q, want %q", v, got, want)
		}
	}
}
