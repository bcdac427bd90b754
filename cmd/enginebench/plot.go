package main

import (
	"fmt"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writePlot draws the scaling curve as SVG: calls per second, p50 and p99
// latency against the number of callers, one line per path, callers on a
// log scale.
func writePlot(w io.Writer, points []Point) error {
	if len(points) == 0 {
		return fmt.Errorf("no scaling curve to draw: the throughput scenario did not run")
	}
	var paths []string
	for _, p := range points {
		if !slices.Contains(paths, p.Path) {
			paths = append(paths, p.Path)
		}
	}
	panels := []struct {
		title, unit string
		of          func(Point) float64
	}{
		{"Throughput", "calls/s", func(p Point) float64 { return p.RPS }},
		{"Median latency", "p50 (ms)", func(p Point) float64 { return p.P50US / 1000 }},
		{"Tail latency", "p99 (ms)", func(p Point) float64 { return p.P99US / 1000 }},
	}
	plots := make([][]*plot.Plot, 1)
	for _, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "callers"
		p.Y.Label.Text = panel.unit
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = callerTicks{}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		var lines []any
		for _, path := range paths {
			var xys plotter.XYs
			for _, pt := range points {
				if pt.Path == path {
					xys = append(xys, plotter.XY{X: float64(pt.Callers), Y: panel.of(pt)})
				}
			}
			lines = append(lines, path, xys)
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return err
		}
		if panel.title == "Throughput" {
			// The lines climb to the top right and the top left is
			// crowded at one caller: the latency panels, whose top
			// left stays empty, carry the legend for all three.
			p.Legend = plot.NewLegend()
		}
		plots[0] = append(plots[0], p)
	}
	width, height := 15*vg.Inch, 5*vg.Inch
	canvas := vgsvg.New(width, height)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, draw.New(canvas))
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}
	_, err := canvas.WriteTo(w)
	return err
}

// callerTicks marks the curve's points on the log axis.
type callerTicks struct{}

func (callerTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, n := range curveCallers {
		if v := float64(n); v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprint(n)})
		}
	}
	if len(ticks) == 0 {
		ticks = append(ticks, plot.Tick{Value: lo, Label: fmt.Sprint(math.Round(lo))})
	}
	return ticks
}
