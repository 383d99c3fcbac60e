package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chartModes are the modes whose queue depth over time is drawn.
func chartModes() []Mode { return []Mode{RoundRobin, KVXDS, KVXDSWeights, KVXDSGroups} }

// fileSafe turns a mode into a file-name part ("kvxds+weights" →
// "kvxds-weights").
func fileSafe(s string) string {
	return strings.NewReplacer("+", "-", "/", "-", " ", "-").Replace(s)
}

// WriteCharts draws a workload's charts into dir and returns their paths:
// hit rate per mode and client TTFT p95 per mode (bar charts), and each
// replica's queue depth over simulated time for round_robin, kvxds and
// kvxds+weights; for the rolling workload, the hit rate over time per
// variant.
func WriteCharts(dir string, wr *WorkloadReport) ([]string, error) {
	if wr.Rolling != nil {
		return writeRollingCharts(dir, wr)
	}
	var paths []string
	var names []string
	var hits []float64
	var tnames []string
	var p95 []float64
	title := ": prefix-cache hit rate (engine counters)"
	if wr.PD.On() {
		title = ": prefill hit rate (decode replicas' headers)"
	}
	for _, m := range wr.Modes {
		names = append(names, string(m.Mode))
		if m.PD != nil {
			hits = append(hits, m.PD.PrefillHitRate)
		} else {
			hits = append(hits, m.HitRate)
		}
		if m.Mode.Live() && !math.IsNaN(m.ClientTTFT.P95) {
			tnames = append(tnames, string(m.Mode))
			p95 = append(p95, m.ClientTTFT.P95)
		}
	}
	if len(names) > 0 {
		path := filepath.Join(dir, wr.label()+"-hit-rate.png")
		if err := barChart(path, wr.label()+title, "hit rate", names, hits, "%.2f"); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	if len(tnames) > 0 {
		path := filepath.Join(dir, wr.label()+"-ttft-p95.png")
		if err := barChart(path, wr.label()+": TTFT p95 (client, simulated s)", "seconds", tnames, p95, "%.3f"); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	for _, mode := range chartModes() {
		m, ok := wr.Mode(mode)
		if !ok || len(m.Series) == 0 {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-queue-%s.png", wr.label(), fileSafe(string(mode))))
		if err := queueChart(path, fmt.Sprintf("%s, %s: queue depth per replica", wr.label(), mode), m.Series, wr.TimeScale); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func barChart(path, title, ylabel string, names []string, values []float64, format string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	vs := make(plotter.Values, len(values))
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			v = 0
		}
		vs[i] = v
	}
	bars, err := plotter.NewBarChart(vs, vg.Points(40))
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	top := 0.0
	xys := make(plotter.XYs, len(vs))
	labels := make([]string, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		labels[i] = fmt.Sprintf(format, v)
		top = max(top, v)
	}
	lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].XAlign = -0.5
		lab.TextStyle[i].YAlign = 0.2
	}
	p.Add(lab)
	if top > 0 {
		p.Y.Max = top * 1.15
	}
	if err := p.Save(vg.Points(110*float64(len(vs))+120), 4*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}

func queueChart(path, title string, series []Sample, scale float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "simulated seconds"
	p.Y.Label.Text = "requests waiting + running"
	p.Y.Min = 0
	p.Legend.Top = true
	n := len(series[0].Depth)
	top := 1
	for _, s := range series {
		for _, d := range s.Depth {
			top = max(top, d)
		}
	}
	p.Y.Max = 1.6 * float64(top) // headroom for the legend, top right
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	for r := 0; r < n; r++ {
		xys := make(plotter.XYs, len(series))
		for i, s := range series {
			xys[i] = plotter.XY{X: s.At.Seconds() * scale, Y: float64(s.Depth[r])}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		l.Color = plotutil.Color(r)
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("replica-%d", r), l)
	}
	if err := p.Save(9*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}
