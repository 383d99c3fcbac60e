package bench

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// RollingReport is the rolling workload's results, one per variant and
// mode.
type RollingReport struct {
	Config  Rolling
	Results []RollResult
}

// Result returns variant v's result under mode m, if it ran.
func (r *RollingReport) Result(v RollVariant, m Mode) (RollResult, bool) {
	for _, x := range r.Results {
		if x.Variant == v && x.Mode == m {
			return x, true
		}
	}
	return RollResult{}, false
}

// variants lists the variants that ran, in order.
func (r *RollingReport) variants() []RollVariant {
	var out []RollVariant
	for _, x := range r.Results {
		if len(out) == 0 || out[len(out)-1] != x.Variant {
			out = append(out, x.Variant)
		}
	}
	return out
}

// RollWindow is what the requests sent in one window of a rolling run
// saw. Times are simulated seconds from the stream's start.
type RollWindow struct {
	From, To float64
	// Requests counts the successful requests sent in the window.
	Requests int
	// HitRate is Σ cached / Σ prompt tokens of those requests, as the
	// replicas accounted them (trailers x-cached-tokens and
	// x-prompt-tokens); NaN without requests.
	HitRate float64
	// TTFT is at the client, send to first token.
	TTFT Quantiles
}

// HitPoint is the hit rate of the requests sent in one bucket of time.
type HitPoint struct {
	T        float64 // the bucket's start, simulated seconds
	HitRate  float64 // NaN without requests
	Requests int
}

// RollResult is one rolling run: a variant under a mode.
type RollResult struct {
	Variant RollVariant
	Mode    Mode
	// Requests were replayed; Failed did not stream all their tokens.
	Requests, Failed int
	// RollStart and RollEnd bound the roll, Steps are each replacement's
	// start (simulated seconds).
	RollStart, RollEnd float64
	Steps              []float64
	// Steady is after the warm-up and before the roll, During the roll,
	// After the rest of the stream.
	Steady, During, After RollWindow
	// Loss is Steady.HitRate − During.HitRate, RelativeLoss Loss /
	// Steady.HitRate.
	Loss, RelativeLoss float64
	// StableTurns are the turns sent during the roll whose previous turn
	// was served by a pod that stayed ready, and not terminating, from
	// that turn to this one; StableHitRate is their hit rate. StableMoved
	// of them were served by another pod, StableStrays by another pod
	// that also stayed: sessions that moved although neither end changed.
	StableTurns, StableMoved, StableStrays int
	StableHitRate                          float64
	// Series is the hit rate over the whole stream, warm-up included.
	Series []HitPoint
	// Wall, CPU cores and the machine's busy cores, as for ModeResult.
	Wall                   time.Duration
	CPUCores, MachineCores float64
	Policy                 string `json:"-"`
}

// tally sums the requests of a window.
type tally struct {
	n              int
	cached, prompt float64
	ttft           []float64
}

func (t *tally) add(r reqResult, scale float64) {
	t.n++
	t.cached += float64(r.CachedTokens)
	t.prompt += float64(r.PromptTokens)
	if r.First >= 0 {
		t.ttft = append(t.ttft, (r.First-r.Sent).Seconds()*scale)
	}
}

func (t *tally) hitRate() float64 {
	if t.prompt == 0 {
		return nan()
	}
	return t.cached / t.prompt
}

// turnKind classifies a turn by where it and its previous turn went.
type turnKind int

const (
	// turnOther: the previous turn's pod changed (became ready, began
	// terminating) between the two turns, or is unknown.
	turnOther turnKind = iota
	// turnStayed: the previous turn's pod stayed, and this turn went there.
	turnStayed
	// turnMoved: the previous turn's pod stayed, and this turn went to a
	// pod that changed in between (one coming back under its name, a new
	// one taking its share).
	turnMoved
	// turnStrayed: both pods stayed, yet the turn moved.
	turnStrayed
)

// classifyTurn places turn cur, whose previous turn is prev, by the pods
// (by replica id) that served them.
func classifyTurn(pods map[string]*rollPod, prev, cur reqResult) turnKind {
	a := pods[prev.Replica]
	if a == nil || !a.stable(prev.Sent, cur.Sent) {
		return turnOther
	}
	switch b := pods[cur.Replica]; {
	case cur.Replica == prev.Replica:
		return turnStayed
	case b != nil && b.stable(prev.Sent, cur.Sent):
		return turnStrayed
	}
	return turnMoved
}

// summarizeRoll turns a rolling run into its result. Requests are placed
// in windows by the time they were sent.
func summarizeRoll(v RollVariant, mode Mode, p *workloadPlan, run *rollRun, bucket time.Duration) RollResult {
	scale := p.TimeScale
	sim := func(d time.Duration) float64 { return d.Seconds() * scale }
	warm := never // the wall offset of the first measured arrival
	if p.Warmup < len(p.Requests) {
		warm = time.Duration(float64(p.Requests[p.Warmup].At) / scale)
	}
	out := RollResult{Variant: v, Mode: mode, Requests: len(run.Results), RollStart: sim(run.RollStart),
		RollEnd: sim(run.RollEnd), Wall: run.Wall, Policy: run.Policy, MachineCores: nan()}
	for _, s := range run.Steps {
		out.Steps = append(out.Steps, sim(s))
	}
	if run.Wall > 0 {
		out.CPUCores = run.CPU.Seconds() / run.Wall.Seconds()
		if run.MachineCPU >= 0 {
			out.MachineCores = run.MachineCPU.Seconds() / run.Wall.Seconds()
		}
	}
	pods := map[string]*rollPod{}
	for _, pod := range run.Pods {
		pods[pod.Instance] = pod
	}
	var steady, during, after, stable tally
	var series []tally
	end := time.Duration(0)
	for i, r := range run.Results {
		if r.Err != nil {
			out.Failed++
			continue
		}
		end = max(end, r.Sent)
		if b := int(sim(r.Sent) / bucket.Seconds()); b >= 0 {
			for len(series) <= b {
				series = append(series, tally{})
			}
			series[b].add(r, scale)
		}
		switch {
		case r.Sent < warm:
		case r.Sent < run.RollStart:
			steady.add(r, scale)
		case r.Sent < run.RollEnd:
			during.add(r, scale)
			dep := p.Requests[i].DependsOn
			if dep < 0 || run.Results[dep].Err != nil {
				break
			}
			switch classifyTurn(pods, run.Results[dep], r) {
			case turnStayed:
				stable.add(r, scale)
			case turnMoved:
				stable.add(r, scale)
				out.StableMoved++
			case turnStrayed:
				stable.add(r, scale)
				out.StableMoved++
				out.StableStrays++
			}
		default:
			after.add(r, scale)
		}
	}
	window := func(t *tally, from, to float64) RollWindow {
		return RollWindow{From: from, To: to, Requests: t.n, HitRate: t.hitRate(), TTFT: quantiles(t.ttft)}
	}
	out.Steady = window(&steady, sim(warm), out.RollStart)
	out.During = window(&during, out.RollStart, out.RollEnd)
	out.After = window(&after, out.RollEnd, sim(end))
	out.Loss = out.Steady.HitRate - out.During.HitRate
	out.RelativeLoss = out.Loss / out.Steady.HitRate
	out.StableTurns, out.StableHitRate = stable.n, stable.hitRate()
	for i := range series {
		out.Series = append(out.Series, HitPoint{T: float64(i) * bucket.Seconds(), HitRate: series[i].hitRate(), Requests: series[i].n})
	}
	return out
}

// rollingTargets are the rolling workload's goals, per variant: kvxds
// loses a smaller share of its steady hit rate during the roll than round
// robin (which has much less to lose), keeps the sessions of the pods that
// stay where they are (all but the one ring arc that rounding assigns, see
// docs/concepts/consistency.md), and they keep hitting.
func rollingTargets(w *WorkloadReport, add func(goal, measured string, met bool)) {
	r := w.Rolling
	for _, v := range r.variants() {
		rr, okRR := r.Result(v, RoundRobin)
		kv, okKV := r.Result(v, KVXDS)
		if okRR && okKV {
			add(fmt.Sprintf("%s: kvxds loses a smaller share of its hit rate during the roll than round_robin", v),
				fmt.Sprintf("%s vs %s", lossText(kv), lossText(rr)), kv.RelativeLoss < rr.RelativeLoss)
		}
		if okKV {
			add(fmt.Sprintf("%s: kvxds moves ≤ 2%% of the turns on pods that stay to another that stays", v),
				fmt.Sprintf("%d of %d", kv.StableStrays, kv.StableTurns), kv.StableStrays*50 <= kv.StableTurns)
			add(fmt.Sprintf("%s: under kvxds, turns on pods that stay hit ≥ 0.9 × steady state", v),
				fmt.Sprintf("%s vs %s", num(kv.StableHitRate, 3), num(kv.Steady.HitRate, 3)), kv.StableHitRate >= 0.9*kv.Steady.HitRate)
		}
	}
}

func lossText(x RollResult) string {
	return fmt.Sprintf("%s (%s%%)", num(x.Loss, 3), num(100*x.RelativeLoss, 0))
}

func (r *RollingReport) markdown(w io.Writer, wr *WorkloadReport) {
	c := r.Config
	fmt.Fprintf(w, "## %s\n\n", wr.Name)
	fmt.Fprintf(w, "%s at load %.2f (%.2f req/s) on %d replicas, %d requests, %d sessions, %v simulated at time scale %g; "+
		"%d KV blocks per replica. The replicas are pods in a Kubernetes API server's EndpointSlice, found by "+
		"kvxds's kubernetes discovery, each serving at its own address in a network namespace. From %v on, one "+
		"pod is replaced every %v: a new pod starts with an empty cache at a new address and is ready %v later; "+
		"a terminating pod is listed serving and terminating (kvxds drains it) for at least %v, then until its "+
		"engine is idle, and is then removed and stopped. statefulset: the old pod goes first and the new one "+
		"takes its name (its identity on the ring), highest ordinal first; deployment: the new pod, with a new "+
		"name, is ready before an old one terminates (maxSurge 1). The first %v are warm-up; steady is from "+
		"then to the roll. Hit rate: Σ cached / Σ prompt tokens of the requests sent in a window, as the "+
		"replicas accounted them (trailers: the replicas that left took their counters with them).\n\n",
		c.Workload, wr.Load, wr.Rate, wr.Replicas, wr.Requests, wr.Sessions, wr.Duration, wr.TimeScale, wr.KVBlocks,
		c.Warmup+c.Steady, c.Step, c.Startup, c.Drain, c.Warmup)
	fmt.Fprintf(w, "| variant | mode | hit rate: steady → during the roll → after | loss during the roll | "+
		"TTFT p95: steady → during → after | turns on pods that stayed: hit rate, moved (to one that stayed) | "+
		"failed | roll (simulated) | CPU cores (machine) | wall |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		fmt.Fprintf(w, "| %s | %s | %s → %s → %s | %s | %s → %s → %s | %d: %s, %d (%d) | %d | %s–%ss | %s (%s) | %v |\n",
			x.Variant, x.Mode, num(x.Steady.HitRate, 3), num(x.During.HitRate, 3), num(x.After.HitRate, 3), lossText(x),
			secs(x.Steady.TTFT.P95), secs(x.During.TTFT.P95), secs(x.After.TTFT.P95),
			x.StableTurns, num(x.StableHitRate, 3), x.StableMoved, x.StableStrays,
			x.Failed, num(x.RollStart, 0), num(x.RollEnd, 0), num(x.CPUCores, 2), num(x.MachineCores, 2),
			x.Wall.Round(100*time.Millisecond))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Turns on pods that stayed: turns sent during the roll whose previous turn was served by a pod that "+
		"was ready, and not terminating, from that turn to this one. Moved: served by another pod; in parentheses, "+
		"by another pod that also stayed, a move that no membership change asked for.\n\n")
	for _, x := range r.Results {
		if x.MachineCores >= cpuSaturated*float64(runtime.NumCPU()) {
			fmt.Fprintf(w, "**Warning:** during %s, %s the machine's CPUs were %.0f%% busy: the timings are distorted.\n\n",
				x.Variant, x.Mode, 100*x.MachineCores/float64(runtime.NumCPU()))
		}
	}
	if len(wr.Charts) > 0 {
		fmt.Fprintf(w, "Charts: %s\n\n", strings.Join(wr.Charts, ", "))
	}
}

// rollingCSVHeader names rolling.csv's columns.
func rollingCSVHeader() []string {
	return []string{"variant", "mode", "replicas", "time_scale", "requests", "failed", "roll_start_s", "roll_end_s",
		"steady_requests", "steady_hit_rate", "during_requests", "during_hit_rate", "after_requests", "after_hit_rate",
		"loss", "relative_loss", "steady_ttft_p95_s", "during_ttft_p95_s", "after_ttft_p95_s",
		"stable_turns", "stable_hit_rate", "stable_moved", "stable_strays", "cpu_cores", "machine_cores", "wall_s",
		"hit_rate_series"}
}

// csv writes one row per variant and mode; the last column is the hit
// rate over time, "t:hit_rate" per bucket (simulated seconds).
func (r *RollingReport) csv(w io.Writer, wr *WorkloadReport) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(rollingCSVHeader()); err != nil {
		return err
	}
	f := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
	for _, x := range r.Results {
		series := make([]string, len(x.Series))
		for i, p := range x.Series {
			series[i] = f(p.T) + ":" + f(p.HitRate)
		}
		row := []string{string(x.Variant), string(x.Mode), strconv.Itoa(wr.Replicas), f(wr.TimeScale),
			strconv.Itoa(x.Requests), strconv.Itoa(x.Failed), f(x.RollStart), f(x.RollEnd),
			strconv.Itoa(x.Steady.Requests), f(x.Steady.HitRate), strconv.Itoa(x.During.Requests), f(x.During.HitRate),
			strconv.Itoa(x.After.Requests), f(x.After.HitRate), f(x.Loss), f(x.RelativeLoss),
			f(x.Steady.TTFT.P95), f(x.During.TTFT.P95), f(x.After.TTFT.P95),
			strconv.Itoa(x.StableTurns), f(x.StableHitRate), strconv.Itoa(x.StableMoved), strconv.Itoa(x.StableStrays),
			f(x.CPUCores), f(x.MachineCores), f(x.Wall.Seconds()), strings.Join(series, " ")}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeRollingCharts draws, per variant, the hit rate over time of every
// mode, with the roll's start and end marked.
func writeRollingCharts(dir string, wr *WorkloadReport) ([]string, error) {
	r := wr.Rolling
	var paths []string
	for _, v := range r.variants() {
		path := filepath.Join(dir, fmt.Sprintf("%s-%s-hit-rate.png", wr.Name, v))
		var xs []RollResult
		for _, x := range r.Results {
			if x.Variant == v {
				xs = append(xs, x)
			}
		}
		title := fmt.Sprintf("%s, %s: hit rate over time (%v buckets)", wr.Name, v, r.Config.Bucket)
		if err := rollingChart(path, title, xs); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func rollingChart(path, title string, xs []RollResult) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "simulated seconds (requests by send time)"
	p.Y.Label.Text = "prefix-cache hit rate"
	p.Y.Min, p.Y.Max = 0, 1.15 // headroom for the legend
	p.Legend.Top = true
	p.Legend.Left = true
	for i, x := range xs {
		var xys plotter.XYs
		for _, pt := range x.Series {
			if !math.IsNaN(pt.HitRate) {
				xys = append(xys, plotter.XY{X: pt.T, Y: pt.HitRate})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(string(x.Mode), l)
	}
	if len(xs) > 0 {
		// The roll of the first mode; the others' differ by milliseconds.
		x := xs[0]
		for j, at := range []float64{x.RollStart, x.RollEnd} {
			l, err := plotter.NewLine(plotter.XYs{{X: at, Y: 0}, {X: at, Y: 1}})
			if err != nil {
				return fmt.Errorf("chart %s: %w", path, err)
			}
			l.Color = color.Gray{Y: 80}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			if j == 0 {
				p.Legend.Add("roll start / end", l)
			}
		}
		var ticks plotter.XYs
		for _, s := range x.Steps {
			ticks = append(ticks, plotter.XY{X: s, Y: 0.02})
		}
		if len(ticks) > 0 {
			sc, err := plotter.NewScatter(ticks)
			if err != nil {
				return fmt.Errorf("chart %s: %w", path, err)
			}
			sc.GlyphStyle.Shape = draw.TriangleGlyph{}
			sc.GlyphStyle.Color = color.Gray{Y: 80}
			p.Add(sc)
			p.Legend.Add("a replacement starts", sc)
		}
	}
	if err := p.Save(9*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}
