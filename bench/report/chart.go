// SPDX-License-Identifier: Apache-2.0
package report

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart size.
const (
	chartWidth  = 20 * vg.Centimeter
	chartHeight = 12 * vg.Centimeter
)

// WritePNG draws the measured rows' median Mpps as bars, with their min–max range, to path.
func (r *Report) WritePNG(path string) error {
	var names []string
	var med plotter.Values
	var errs plotter.YErrors
	for _, row := range r.Rows {
		if row.Skip != "" {
			continue
		}
		names = append(names, fmt.Sprintf("%s %s %s", row.Datapath, row.Mix, flowsShort(row.Flows)))
		med = append(med, row.Mpps.Median)
		errs = append(errs, struct{ Low, High float64 }{row.Mpps.Median - row.Mpps.Min, row.Mpps.Max - row.Mpps.Median})
	}
	if len(med) == 0 {
		return fmt.Errorf("chart %s: no measured rows", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("xlb-bench %s — forwarded Mpps (median, min–max), %s", r.Date.Format("2006-01-02"), r.Host.Kernel)
	p.Y.Label.Text = "Mpps at the sink"
	bars, err := plotter.NewBarChart(med, vg.Points(18))
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	bars.Color = color.RGBA{R: 0x33, G: 0x66, B: 0xcc, A: 0xff}
	bars.LineStyle.Width = 0
	p.Add(bars)
	eb := &plotter.YErrorBars{XYs: make(plotter.XYs, len(med)), YErrors: errs}
	for i, v := range med {
		eb.XYs[i] = plotter.XY{X: float64(i), Y: v}
	}
	eb.LineStyle.Width = vg.Points(1)
	eb.CapWidth = vg.Points(6)
	p.Add(eb)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 5
	p.X.Tick.Label.XAlign = -0.9
	p.X.Tick.Label.YAlign = -0.2
	p.Y.Min = 0
	if err := p.Save(chartWidth, chartHeight, path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}

func flowsShort(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%gM", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%gk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
