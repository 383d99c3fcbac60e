package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// The metrics, escape and weights blocks of a pool: how kvxds scrapes each
// replica's engine and turns its load into weights and health.

// engines are the values of a metrics block's engine, in the order
// diagnostics list them.
var engines = []string{EngineVLLM, EngineSGLang, EngineTGI, EngineTRTLLM, EngineCustom}

// signalNames are the labels a signal block may have, in the order
// diagnostics list them; the first three are the core signals, of which a
// custom engine needs at least one.
var signalNames = []string{
	SignalQueueDepth, SignalRunning, SignalKVOccupancy,
	SignalPreemptions, SignalPrefixQueries, SignalPrefixHits, SignalPrefixHitRate, SignalTTFT,
}

const numCoreSignals = 3

func (d *decoder) metrics(spec *metricsSpec) *Metrics {
	m := &Metrics{
		Engine:   DefaultEngine,
		Interval: DefaultScrapeInterval,
		Timeout:  DefaultScrapeTimeout,
		Path:     DefaultMetricsPath,
		Scheme:   DefaultMetricsScheme,
	}

	known := true // whether m.Engine is what the user asked for
	if a := spec.Engine; a != nil {
		switch s, good := d.str(a.Name, a.Expr); {
		case !good: // already reported
			known = false
		case slices.Contains(engines, s):
			m.Engine = s
		default:
			d.errorf(a.Expr.Range(), "Unknown engine",
				`%q is not an engine kvxds knows; use %s, or "custom" with signal blocks naming its metrics.`, s, quotedList(engines[:len(engines)-1], "or"))
			known = false
		}
	}

	d.timing(m, spec)

	if a := spec.Path; a != nil {
		if s, good := d.str(a.Name, a.Expr); good {
			if err := checkMetricsPath(s); err != nil {
				d.errorf(a.Expr.Range(), "Invalid metrics path", "%s.", err)
			} else {
				m.Path = s
			}
		}
	}
	if a := spec.Port; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); good {
			m.Port = uint32(n)
		}
	}
	if a := spec.Scheme; a != nil {
		switch s, good := d.str(a.Name, a.Expr); {
		case !good:
		case s == "http" || s == "https":
			m.Scheme = s
		default:
			d.errorf(a.Expr.Range(), "Invalid scheme", `scheme %q is not supported; use "http" or "https".`, s)
		}
	}
	if a := spec.Model; a != nil {
		if s, good := d.str(a.Name, a.Expr); good && s == "" {
			d.errorf(a.Expr.Range(), "Invalid model",
				"model must not be empty; omit it to keep the series of every model.")
		} else {
			m.Model = s
		}
	}

	m.Signals = d.signals(spec, known && m.Engine == EngineCustom)
	if known && m.Engine != EngineCustom {
		for _, sb := range spec.Signals {
			d.errorf(sb.DefRange, "Not a custom engine",
				`signal blocks only apply to engine = "custom"; the %s profile already knows its metrics. Remove this block, or set engine = "custom" and name every signal's metric.`, m.Engine)
		}
		m.Signals = nil
	}
	return m
}

// timing decodes interval, timeout and stale_after into m; they bound
// each other.
func (d *decoder) timing(m *Metrics, spec *metricsSpec) {
	interval, intervalOK := d.durationOr(spec.Interval, DefaultScrapeInterval,
		fmt.Sprintf("The default is %q.", DefaultScrapeInterval.String()))
	if intervalOK && interval < MinScrapeInterval {
		d.errorf(spec.Interval.Expr.Range(), "Invalid scrape interval",
			"interval %s is too short; use at least %s (the default is %s): every scrape makes each replica render its metrics.",
			interval, MinScrapeInterval, DefaultScrapeInterval)
		intervalOK = false
	}
	timeout, timeoutOK := d.durationOr(spec.Timeout, DefaultScrapeTimeout,
		fmt.Sprintf("The default is %q.", DefaultScrapeTimeout.String()))
	if timeoutOK && timeout == 0 {
		d.errorf(spec.Timeout.Expr.Range(), "Invalid scrape timeout",
			"timeout must be positive; omit it for the default of %s.", DefaultScrapeTimeout)
		timeoutOK = false
	}
	if intervalOK && timeoutOK && timeout >= interval {
		if a := spec.Timeout; a != nil {
			d.errorf(a.Expr.Range(), "Invalid scrape timeout",
				"timeout %s must be shorter than interval %s%s, so that a scrape ends before the next one starts; lower timeout or raise interval.",
				timeout, interval, where(spec.Interval))
		} else {
			d.errorf(spec.Interval.Expr.Range(), "Invalid scrape interval",
				"interval %s must be longer than timeout %s (the default), so that a scrape ends before the next one starts; raise interval, or set a shorter timeout too, as in timeout = %q.",
				interval, timeout, (interval / 2).String())
		}
		timeoutOK = false
	}

	staleDefault := time.Duration(math.MaxInt64) // for an interval of centuries
	if interval <= staleDefault/DefaultStaleAfterIntervals {
		staleDefault = DefaultStaleAfterIntervals * interval
	}
	stale, staleOK := d.durationOr(spec.StaleAfter, staleDefault,
		fmt.Sprintf("The default is %d intervals.", DefaultStaleAfterIntervals))
	if staleOK && intervalOK && stale < interval {
		d.errorf(spec.StaleAfter.Expr.Range(), "Invalid stale_after",
			"stale_after %s is shorter than interval %s%s; keep the last good values for at least one interval (the default is %d intervals, %s).",
			stale, interval, where(spec.Interval), DefaultStaleAfterIntervals, staleDefault)
	}
	m.Interval, m.Timeout, m.StaleAfter = interval, timeout, stale
}

// where says where a setting that another one is compared with came from:
// its line, or the default.
func where(a *hcl.Attribute) string {
	if a == nil {
		return " (the default)"
	}
	return fmt.Sprintf(" (line %d)", a.Range.Start.Line)
}

// signals decodes the signal blocks of a metrics block. custom says the
// engine is known to be custom, which requires a core signal.
func (d *decoder) signals(spec *metricsSpec, custom bool) map[string]SignalSource {
	out := map[string]SignalSource{}
	seen := map[string]hcl.Range{} // signal name -> label of its first block
	unknown := false
	for i := range spec.Signals {
		sb := &spec.Signals[i]
		named := true
		if !slices.Contains(signalNames, sb.Name) {
			d.errorf(sb.NameRange, "Unknown signal",
				"%q is not a signal; use %s.", sb.Name, quotedList(signalNames, "or"))
			named, unknown = false, true
		} else if prev, dup := seen[sb.Name]; dup {
			d.errorf(sb.NameRange, "Duplicate signal",
				"Signal %q is already defined at line %d; keep a single block for it.", sb.Name, prev.Start.Line)
			named = false
		} else {
			seen[sb.Name] = sb.NameRange
		}
		src, good := d.signalSource(sb)
		if named && good {
			out[sb.Name] = src
		}
	}
	// A misspelt signal name is likely the core signal meant; its own
	// diagnostic says enough.
	if custom && !unknown && !slices.ContainsFunc(signalNames[:numCoreSignals], func(n string) bool { _, ok := seen[n]; return ok }) {
		d.errorf(spec.Engine.Expr.Range(), "Missing core signal",
			`A custom engine needs a signal block for at least one of %s, which weights and the escape hatch are computed from, as in signal "kv_occupancy" { metric = "my_engine_kv_used_ratio" }.`,
			quotedList(signalNames[:numCoreSignals], "or"))
	}
	return out
}

func (d *decoder) signalSource(sb *signalSpec) (SignalSource, bool) {
	src := SignalSource{Scale: DefaultSignalScale}
	good := true
	if a := sb.Metric; a == nil {
		d.errorf(sb.DefRange, "Missing metric",
			`Signal %q needs the Prometheus metric that carries it, as in metric = "my_engine_%s".`, sb.Name, sb.Name)
		good = false
	} else if s, g := d.str(a.Name, a.Expr); !g {
		good = false
	} else if err := checkMetricName(s); err != nil {
		d.errorf(a.Expr.Range(), "Invalid metric name", "%s.", err)
		good = false
	} else {
		src.Metric = s
	}
	if a := sb.Labels; a != nil {
		labels, g := d.labels(a)
		src.Labels, good = labels, good && g
	}
	if a := sb.Scale; a != nil {
		f, g := d.numberIn(a, positive, "Invalid scale",
			" (the default is 1); it multiplies the metric's value")
		src.Scale, good = f, good && g
	}
	return src, good
}

// labels decodes a map of exact label matches, pointing at the offending
// key or value.
func (d *decoder) labels(a *hcl.Attribute) (map[string]string, bool) {
	pairs, diags := hcl.ExprMap(a.Expr)
	d.add(diags)
	if diags.HasErrors() {
		return nil, false
	}
	var out map[string]string
	seen := map[string]hcl.Range{}
	good := true
	for _, kv := range pairs {
		if k, ok := d.str("label name", kv.Key); !ok {
			good = false
		} else if err := checkLabelName(k); err != nil {
			d.errorf(kv.Key.Range(), "Invalid label name", "%s.", err)
			good = false
		} else if prev, dup := seen[k]; dup {
			d.errorf(kv.Key.Range(), "Duplicate label",
				"Label %q is already matched at line %d; a series has one value per label.", k, prev.Start.Line)
			good = false
		} else {
			seen[k] = kv.Key.Range()
			if v, ok := d.str("label value", kv.Value); !ok {
				good = false
			} else {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
			}
		}
	}
	return out, good
}

// checkMetricName accepts a classic Prometheus metric name.
func checkMetricName(s string) error {
	if s == "" {
		return fmt.Errorf(`metric must not be empty; name the Prometheus metric that carries the signal, as in "my_engine_kv_used_ratio"`)
	}
	for i, c := range s {
		if isPromNameChar(c, i == 0) || c == ':' {
			continue
		}
		what := fmt.Sprintf("%q is not allowed", c)
		if i == 0 && c >= '0' && c <= '9' {
			what = "it must not start with a digit"
		}
		return fmt.Errorf("%q is not a valid Prometheus metric name: %s; use letters, digits, '_' and ':', not starting with a digit", s, what)
	}
	return nil
}

// checkLabelName accepts a Prometheus label name that is not reserved.
func checkLabelName(s string) error {
	if s == "" {
		return fmt.Errorf(`label names must not be empty; match a label of the metric, as in { device = "gpu" }`)
	}
	if strings.HasPrefix(s, "__") {
		return fmt.Errorf("%q is not a valid label name: names starting with \"__\" are reserved for Prometheus itself", s)
	}
	for i, c := range s {
		if isPromNameChar(c, i == 0) {
			continue
		}
		what := fmt.Sprintf("%q is not allowed", c)
		if i == 0 && c >= '0' && c <= '9' {
			what = "it must not start with a digit"
		}
		return fmt.Errorf("%q is not a valid label name: %s; use letters, digits and '_', not starting with a digit", s, what)
	}
	return nil
}

func isPromNameChar(c rune, first bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || !first && c >= '0' && c <= '9'
}

// checkMetricsPath accepts the path part of a URL.
func checkMetricsPath(s string) error {
	if !strings.HasPrefix(s, "/") {
		return fmt.Errorf(`path %q must start with "/", as in %q`, s, DefaultMetricsPath)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return fmt.Errorf("path %q must be a plain URL path: %q is not allowed", s, c)
		}
	}
	return nil
}

func defaultEscape() Escape {
	return Escape{
		MaxQueueDepth:        DefaultMaxQueueDepth,
		MaxKVOccupancy:       DefaultMaxKVOccupancy,
		MaxPreemptionRate:    DefaultMaxPreemptionRate,
		ResumeQueueDepth:     DefaultMaxQueueDepth / 2,
		ResumeKVOccupancy:    resumeKVOccupancy(DefaultMaxKVOccupancy),
		Hold:                 DefaultHold,
		MaxSaturatedFraction: DefaultMaxSaturatedFraction,
	}
}

// resumeKVOccupancy is resume_kv_occupancy's default for a maximum,
// rounded to 12 decimals so that 0.95 gives 0.85 rather than
// 0.8499999999999999.
// Below the margin it is half the maximum: a resume value of 0 could never
// be reached, and the replica would never return.
func resumeKVOccupancy(maxKV float64) float64 {
	if maxKV <= DefaultResumeKVMargin {
		return maxKV / 2
	}
	return math.Round((maxKV-DefaultResumeKVMargin)*1e12) / 1e12
}

var (
	positive   = span{lo: 0, loOpen: true, hi: math.Inf(1)}
	nonNeg     = span{lo: 0, hi: math.Inf(1)}
	unitClosed = span{lo: 0, hi: 1}
	unitOpen0  = span{lo: 0, loOpen: true, hi: 1} // (0, 1]
	unitOpen1  = span{lo: 0, hi: 1, hiOpen: true} // [0, 1)
)

func (d *decoder) escape(spec *escapeSpec) Escape {
	e := defaultEscape()
	maxQ, maxQOK := d.numberOr(spec.MaxQueueDepth, e.MaxQueueDepth, positive, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); a replica with this many requests waiting is saturated", e.MaxQueueDepth))
	maxKV, maxKVOK := d.numberOr(spec.MaxKVOccupancy, e.MaxKVOccupancy, unitOpen0, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); it is the fraction of KV-cache blocks in use at which a replica is saturated", e.MaxKVOccupancy))
	e.MaxQueueDepth, e.MaxKVOccupancy = maxQ, maxKV
	e.MaxPreemptionRate, _ = d.numberOr(spec.MaxPreemptionRate, e.MaxPreemptionRate, nonNeg, "Invalid saturation threshold",
		" (the default is 0: any preemption saturates); it is in preemptions per second")

	e.ResumeQueueDepth = maxQ / 2
	if a := spec.ResumeQueueDepth; a != nil {
		if f, good := d.numberIn(a, positive, "Invalid resume threshold", " (the default is half of max_queue_depth); a saturated replica returns once fewer requests than this wait, so it must be above 0"); good {
			e.ResumeQueueDepth = f
			if maxQOK && f >= maxQ {
				d.errorf(a.Expr.Range(), "Invalid resume threshold",
					"resume_queue_depth %g must be below max_queue_depth %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is half of max_queue_depth).",
					f, maxQ, where(spec.MaxQueueDepth))
			}
		}
	}
	e.ResumeKVOccupancy = resumeKVOccupancy(maxKV)
	if a := spec.ResumeKVOccupancy; a != nil {
		if f, good := d.numberIn(a, unitOpen0, "Invalid resume threshold", " (the default is max_kv_occupancy minus 0.1); a saturated replica returns once its KV occupancy is below this, so it must be above 0"); good {
			e.ResumeKVOccupancy = f
			if maxKVOK && f >= maxKV {
				d.errorf(a.Expr.Range(), "Invalid resume threshold",
					"resume_kv_occupancy %g must be below max_kv_occupancy %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is max_kv_occupancy minus 0.1).",
					f, maxKV, where(spec.MaxKVOccupancy))
			}
		}
	}

	e.Hold, _ = d.durationOr(spec.Hold, e.Hold, fmt.Sprintf("The default is %q.", DefaultHold.String()))
	e.MaxSaturatedFraction, _ = d.numberOr(spec.MaxSaturatedFraction, e.MaxSaturatedFraction, unitClosed, "Invalid saturated fraction",
		fmt.Sprintf(" (the default is %g); it is the largest fraction of the pool out of the hash table at once", e.MaxSaturatedFraction))
	return e
}

func defaultWeights() Weights {
	return Weights{
		Min:         DefaultWeightMin,
		Max:         DefaultWeightMax,
		Levels:      min(DefaultWeightLevels, DefaultWeightMax-DefaultWeightMin+1),
		Smoothing:   DefaultWeightSmoothing,
		Hysteresis:  DefaultWeightHysteresis,
		MinInterval: DefaultWeightMinInterval,
	}
}

func (d *decoder) weights(spec *weightsSpec) Weights {
	w := defaultWeights()
	rangeOK := true
	if a := spec.Min; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, MaxWeightMultiplier, "Invalid weight range")
		w.Min, rangeOK = uint32(n), good
	}
	if a := spec.Max; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, MaxWeightMultiplier, "Invalid weight range")
		w.Max, rangeOK = uint32(n), rangeOK && good
	}
	if rangeOK && w.Min > w.Max {
		if a := spec.Max; a != nil {
			d.errorf(a.Expr.Range(), "Invalid weight range",
				"max %d is below min %d%s; raise max or lower min.", w.Max, w.Min, where(spec.Min))
		} else {
			d.errorf(spec.Min.Expr.Range(), "Invalid weight range",
				"min %d is above max %d (the default); set max as well, to %d or more.", w.Min, w.Max, w.Min)
		}
		rangeOK = false
	}

	width := 1
	if rangeOK {
		width = int(w.Max-w.Min) + 1
	}
	w.Levels = min(DefaultWeightLevels, width)
	if a := spec.Levels; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, MaxWeightMultiplier, "Invalid weight levels"); good {
			w.Levels = int(n)
			if rangeOK && w.Levels > width {
				d.errorf(a.Expr.Range(), "Invalid weight levels",
					"levels %d is more than the %d weights from min %d to max %d; use levels = %d or less, or widen min..max.",
					n, width, w.Min, w.Max, width)
			}
		}
	}

	w.Smoothing, _ = d.numberOr(spec.Smoothing, w.Smoothing, unitOpen0, "Invalid smoothing",
		fmt.Sprintf(" (the default is %g); it is the weight of a new observation in the moving average, and 0 would ignore every one", w.Smoothing))
	w.Hysteresis, _ = d.numberOr(spec.Hysteresis, w.Hysteresis, unitOpen1, "Invalid hysteresis",
		fmt.Sprintf(" (the default is %g); it is a fraction of one level's width, and at 1 the top weight could never be reached", w.Hysteresis))
	w.MinInterval, _ = d.durationOr(spec.MinInterval, w.MinInterval,
		fmt.Sprintf("The default is %q.", DefaultWeightMinInterval.String()))
	return w
}

// span is a range of numbers from lo (excluded if loOpen) to hi
// (included; +Inf for no bound).
type span struct {
	lo, hi         float64
	loOpen, hiOpen bool
}

func (s span) contains(f float64) bool {
	return (f > s.lo || !s.loOpen && f == s.lo) && (f < s.hi || !s.hiOpen && f == s.hi)
}

// String says what to write, as in "0 to 1" or "more than 0".
func (s span) String() string {
	lo := fmt.Sprintf("%g or more", s.lo)
	if s.loOpen {
		lo = fmt.Sprintf("more than %g", s.lo)
	}
	switch {
	case math.IsInf(s.hi, 1):
		return lo
	case s.hiOpen:
		return fmt.Sprintf("%s and less than %g", lo, s.hi)
	case !s.loOpen:
		return fmt.Sprintf("%g to %g", s.lo, s.hi)
	}
	return fmt.Sprintf("%s and at most %g", lo, s.hi)
}

// numberIn evaluates a as a number in s; hint follows the range in the
// diagnostic, as in " (the default is 0.5)".
func (d *decoder) numberIn(a *hcl.Attribute, s span, summary, hint string) (float64, bool) {
	v, ok := d.value(a.Name, a.Expr, cty.Number, "a number")
	if !ok {
		return 0, false
	}
	f, _ := v.AsBigFloat().Float64() // ±Inf beyond float64's range
	if math.IsInf(f, 0) || !s.contains(f) {
		d.errorf(a.Expr.Range(), summary, "%s %s is out of range; use %s%s.", a.Name, v.AsBigFloat().Text('g', 10), s, hint)
		return 0, false
	}
	return f, true
}

// numberOr is numberIn for an optional attribute (a may be nil): def when
// unset or invalid, and ok false after a diagnostic.
func (d *decoder) numberOr(a *hcl.Attribute, def float64, s span, summary, hint string) (float64, bool) {
	if a == nil {
		return def, true
	}
	f, ok := d.numberIn(a, s, summary, hint)
	if !ok {
		return def, false
	}
	return f, true
}

// quotedList renders names as `"a", "b" or "c"`.
func quotedList(names []string, conj string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " " + conj + " " + q[len(q)-1]
}
