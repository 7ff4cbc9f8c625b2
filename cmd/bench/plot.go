package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotDPI is the resolution of the PNG: -width and -height are its pixels.
const plotDPI = 96

// runPlot is `bench plot`: a PNG of a `bench scale` results file.
func runPlot(args []string) error {
	fs := flag.NewFlagSet("bench plot", flag.ContinueOnError)
	in := fs.String("in", "bench-scale.json", "results of `bench scale`")
	out := fs.String("out", "docs/bench-scale.png", "the PNG to write")
	width := fs.Int("width", 1400, "width in pixels")
	height := fs.Int("height", 560, "height in pixels")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench plot: unexpected argument %q", fs.Arg(0))
	}
	b, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var r scaleResults
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	png, err := renderScale(&r, *width, *height)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	if dir := filepath.Dir(*out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(*out, png, 0o644); err != nil {
		return err
	}
	fmt.Println("plot written to", *out)
	return nil
}

// renderScale draws the results of `bench scale` as a PNG of width × height
// pixels: throughput against the rows in the tables (log scale) on the left;
// on the right, the latency of new claims without and during the clean-up,
// when it ran.
func renderScale(r *scaleResults, width, height int) ([]byte, error) {
	if len(r.Steps) == 0 {
		return nil, errors.New("no step to plot")
	}
	if width < 200 || height < 150 {
		return nil, errors.New("the plot needs at least 200 × 150 pixels")
	}
	left, err := throughputPlot(r)
	if err != nil {
		return nil, err
	}
	row := []*plot.Plot{left}
	if r.Cleanup != nil {
		right, err := cleanupPlot(r.Cleanup)
		if err != nil {
			return nil, err
		}
		row = append(row, right)
	}
	px := func(n int) vg.Length { return vg.Length(n) * vg.Inch / plotDPI }
	c := vgimg.NewWith(vgimg.UseWH(px(width), px(height)), vgimg.UseDPI(plotDPI))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(24), PadTop: vg.Points(8),
		PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func throughputPlot(r *scaleResults) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "How throughput changes with the rows in the tables"
	p.X.Label.Text = "finished keys (and leads) in the tables"
	p.Y.Label.Text = "per second"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = decadeTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var claims, replays, whole plotter.XYs
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, st := range r.Steps {
		x := float64(st.Rows)
		if x <= 0 {
			return nil, fmt.Errorf("a step with %d rows", st.Rows)
		}
		lo, hi = min(lo, x), max(hi, x)
		if st.Claims != nil {
			claims = append(claims, plotter.XY{X: x, Y: st.Claims.PerS})
		}
		if st.Replays != nil {
			replays = append(replays, plotter.XY{X: x, Y: st.Replays.PerS})
		}
		if st.System != nil {
			whole = append(whole, plotter.XY{X: x, Y: st.System.CompletedPerS})
		}
	}
	var series []any
	for _, s := range []struct {
		name string
		xys  plotter.XYs
	}{
		{"new claims (worker stopped)", claims},
		{"replays of keys drawn at random", replays},
		{"whole system: completed leads", whole},
	} {
		if len(s.xys) > 0 {
			series = append(series, s.name, s.xys)
		}
	}
	if err := plotutil.AddLinePoints(p, series...); err != nil {
		return nil, err
	}
	// A margin of half a decade on each side, so that one step still has
	// a range and the end points are not on the frame.
	p.X.Min, p.X.Max = lo/math.Sqrt(10), hi*math.Sqrt(10)
	// Room above the highest point for the legend.
	p.Y.Min, p.Y.Max = 0, headroom(p.Y.Max)
	return p, nil
}

func cleanupPlot(c *cleanupResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("New claims at %s/s; clean-up of %s expired keys, %.1f s", human(c.Rate), human(float64(c.Expired)), c.Seconds)
	p.Y.Label.Text = "POST latency (ms)"
	p.Legend.Top = true
	p.Legend.Left = true
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	w := vg.Points(28)
	without, err := plotter.NewBarChart(plotter.Values{c.Without.P50Ms, c.Without.P99Ms}, w)
	if err != nil {
		return nil, err
	}
	without.Color = color.RGBA{R: 90, G: 140, B: 200, A: 255}
	without.Offset = -w / 2
	during, err := plotter.NewBarChart(plotter.Values{c.During.P50Ms, c.During.P99Ms}, w)
	if err != nil {
		return nil, err
	}
	during.Color = color.RGBA{R: 220, G: 110, B: 60, A: 255}
	during.Offset = w / 2
	p.Add(without, during)
	p.Legend.Add("without the clean-up", without)
	p.Legend.Add("during the clean-up", during)
	p.NominalX("p50", "p99")
	p.X.Min, p.X.Max = -0.6, 1.6
	p.Y.Min, p.Y.Max = 0, headroom(max(c.Without.P99Ms, c.During.P99Ms, c.Without.P50Ms, c.During.P50Ms))
	return p, nil
}

// headroom is an axis maximum a third above top, for the legend.
func headroom(top float64) float64 {
	if top <= 0 {
		return 1
	}
	return top * 4 / 3
}

// decadeTicks marks the powers of ten of a log axis, labelled 1k, 10k,
// 1M..., and the steps between them unlabelled.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		d := math.Pow(10, e)
		for i := 1; i < 10; i++ {
			v := d * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 {
				t.Label = human(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// human writes 10000 as 10k and 1000000 as 1M.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}
