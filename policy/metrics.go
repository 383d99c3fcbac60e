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

	"github.com/kvxds/kvxds/weights"
)

// The metrics, escape and weights blocks of a pool: how kvxds scrapes each
// replica's engine and turns its load into weights and health.

func (d *decoder) metrics(spec *metricsSpec) *Metrics {
	m := &Metrics{
		Engine:   weights.DefaultEngine,
		Interval: weights.DefaultScrapeInterval,
		Timeout:  weights.DefaultScrapeTimeout,
		Path:     weights.DefaultMetricsPath,
		Scheme:   weights.DefaultMetricsScheme,
	}

	known := true // whether m.Engine is what the user asked for
	if a := spec.Engine; a != nil {
		switch s, good := d.str(a.Name, a.Expr); {
		case !good: // already reported
			known = false
		case slices.Contains(weights.Engines(), s):
			m.Engine = s
		default:
			d.errorf(a.Expr.Range(), "Unknown engine",
				`%q is not an engine kvxds knows; use %s, or "custom" with signal blocks naming its metrics.`, s, quotedList(slices.DeleteFunc(weights.Engines(), func(e string) bool { return e == EngineCustom }), "or"))
			known = false
		}
	} else if len(spec.Signals) > 0 {
		// Signal blocks only apply to a custom engine.
		m.Engine = EngineCustom
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

// timing decodes interval, timeout and stale_after into m. They must
// satisfy timeout < interval <= stale_after, and each one left unset
// follows the ones that are set, so that only values written in the file
// can conflict (as Prometheus caps its default scrape timeout at the
// interval):
//
//   - timeout: weights.DefaultScrapeTimeout, or half the interval if that is
//     shorter;
//   - interval: weights.DefaultScrapeInterval, or twice the timeout if that is not
//     shorter than the default, but no longer than stale_after;
//   - stale_after: weights.DefaultStaleAfterIntervals intervals.
func (d *decoder) timing(m *Metrics, spec *metricsSpec) {
	// Each xSet says the file holds a valid value; a bad one is reported,
	// then neither steers a default nor is compared, and xOK is false.
	interval, intervalSet, intervalOK := d.optDuration(spec.Interval,
		fmt.Sprintf("The default is %q.", weights.DefaultScrapeInterval.String()))
	if intervalSet && interval < weights.MinScrapeInterval {
		d.errorf(spec.Interval.Expr.Range(), "Invalid scrape interval",
			"interval %s is too short; use at least %s (the default is %s): every scrape makes each replica render its metrics.",
			interval, weights.MinScrapeInterval, weights.DefaultScrapeInterval)
		intervalSet, intervalOK = false, false
	}
	timeout, timeoutSet, _ := d.optDuration(spec.Timeout,
		fmt.Sprintf("The default is %s, or half the interval if that is shorter.", weights.DefaultScrapeTimeout))
	if timeoutSet && timeout == 0 {
		d.errorf(spec.Timeout.Expr.Range(), "Invalid scrape timeout",
			"timeout must be positive; omit it for the default of %s, or half the interval if that is shorter.", weights.DefaultScrapeTimeout)
		timeoutSet = false
	}
	stale, staleSet, _ := d.optDuration(spec.StaleAfter,
		fmt.Sprintf("The default is %d intervals.", weights.DefaultStaleAfterIntervals))

	switch {
	case intervalSet:
		if timeoutSet && timeout >= interval {
			d.errorf(spec.Timeout.Expr.Range(), "Invalid scrape timeout",
				"timeout %s must be shorter than interval %s (line %d), so that a scrape ends before the next one starts; lower timeout or raise interval.",
				timeout, interval, spec.Interval.Range.Start.Line)
		}
		if staleSet && stale < interval {
			d.errorf(spec.StaleAfter.Expr.Range(), "Invalid stale_after",
				"stale_after %s is shorter than interval %s (line %d); keep the last good values for at least one interval (the default is %d intervals, %s).",
				stale, interval, spec.Interval.Range.Start.Line, weights.DefaultStaleAfterIntervals, staleAfter(interval))
		}
	case !intervalOK:
		// Reported; the default only serves the other defaults.
		interval = weights.DefaultScrapeInterval
	default:
		interval = weights.DefaultScrapeInterval
		if timeoutSet && timeout >= interval {
			interval = saturatingMul(timeout, 2)
		}
		if staleSet && stale < interval {
			interval = stale
		}
		switch {
		case staleSet && stale < weights.MinScrapeInterval:
			d.errorf(spec.StaleAfter.Expr.Range(), "Invalid stale_after",
				"stale_after %s is shorter than any scrape interval (at least %s); keep the last good values for at least one interval, or omit stale_after for the default of %d intervals.",
				stale, weights.MinScrapeInterval, weights.DefaultStaleAfterIntervals)
		case timeoutSet && staleSet && timeout >= stale:
			d.errorf(spec.StaleAfter.Expr.Range(), "Invalid stale_after",
				"stale_after %s leaves no room for the scrape interval, which must be longer than timeout %s (line %d) and at most stale_after; raise stale_after or lower timeout.",
				stale, timeout, spec.Timeout.Range.Start.Line)
		case timeoutSet && timeout >= interval: // no duration is twice as long
			d.errorf(spec.Timeout.Expr.Range(), "Invalid scrape timeout",
				"timeout %s is too long: the scrape interval must be longer; lower timeout.", timeout)
		}
	}

	if !timeoutSet {
		timeout = scrapeTimeout(interval)
	}
	if !staleSet {
		stale = staleAfter(interval)
	}
	m.Interval, m.Timeout, m.StaleAfter = interval, timeout, stale
}

// scrapeTimeout is timeout's default for an interval: half of it keeps a
// scrape well clear of the next one when the interval is short.
func scrapeTimeout(interval time.Duration) time.Duration {
	return min(weights.DefaultScrapeTimeout, interval/2)
}

// staleAfter is stale_after's default for an interval.
func staleAfter(interval time.Duration) time.Duration {
	return saturatingMul(interval, weights.DefaultStaleAfterIntervals)
}

// saturatingMul returns d·n (n > 0), or the longest duration if that
// overflows: intervals of centuries are valid.
func saturatingMul(d time.Duration, n int64) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
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
		if !slices.Contains(weights.SignalNames(), sb.Name) {
			d.errorf(sb.NameRange, "Unknown signal",
				"%q is not a signal; use %s.", sb.Name, quotedList(weights.SignalNames(), "or"))
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
	if custom && !unknown && !slices.ContainsFunc(weights.CoreSignalNames(), func(n string) bool { _, ok := seen[n]; return ok }) {
		core := quotedList(weights.CoreSignalNames(), "or")
		if spec.Engine != nil {
			d.errorf(spec.Engine.Expr.Range(), "Missing core signal",
				`A custom engine needs a signal block for at least one of %s, which weights and the escape hatch are computed from, as in signal "kv_occupancy" { metric = "my_engine_kv_used_ratio" }.`,
				core)
		} else {
			// The signal blocks made the engine custom.
			d.errorf(spec.Signals[0].DefRange, "Missing core signal",
				`Signal blocks make the engine "custom", which needs a signal block for at least one of %s: weights and the escape hatch are computed from them. Add one, as in signal "kv_occupancy" { metric = "my_engine_kv_used_ratio" }, or remove the signal blocks to use a built-in profile (%s by default).`,
				core, weights.DefaultEngine)
		}
	}
	return out
}

func (d *decoder) signalSource(sb *signalSpec) (SignalSource, bool) {
	src := SignalSource{Scale: weights.DefaultSignalScale}
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
		src.Name = s
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
		return fmt.Errorf(`path %q must start with "/", as in %q`, s, weights.DefaultMetricsPath)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return fmt.Errorf("path %q must be a plain URL path: %q is not allowed", s, c)
		}
	}
	return nil
}

var (
	positive   = span{lo: 0, loOpen: true, hi: math.Inf(1)}
	nonNeg     = span{lo: 0, hi: math.Inf(1)}
	unitClosed = span{lo: 0, hi: 1}
	unitOpen0  = span{lo: 0, loOpen: true, hi: 1} // (0, 1]
	unitOpen1  = span{lo: 0, hi: 1, hiOpen: true} // [0, 1)
	unitOpen   = span{lo: 0, loOpen: true, hi: 1, hiOpen: true}
)

// escape decodes an escape block. A resume value left unset follows its
// maximum, and a maximum left unset makes room above a resume value that
// is set, so that only values written in the file can conflict.
func (d *decoder) escape(spec *escapeSpec) Escape {
	e := weights.DefaultEscape()
	maxQ, maxQOK := d.numberOr(spec.MaxQueueDepth, e.MaxQueueDepth, positive, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); a replica with this many requests waiting is saturated", e.MaxQueueDepth))
	maxKV, maxKVOK := d.numberOr(spec.MaxKVOccupancy, e.MaxKVOccupancy, unitOpen0, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); it is the fraction of KV-cache blocks in use at which a replica is saturated", e.MaxKVOccupancy))
	e.MaxPreemptionRate, _ = d.numberOr(spec.MaxPreemptionRate, e.MaxPreemptionRate, nonNeg, "Invalid saturation threshold",
		" (the default is 0: any preemption saturates); it is in preemptions per second")

	resumeQ, good := d.numberOr(spec.ResumeQueueDepth, 0, positive, "Invalid resume threshold",
		" (the default is half of max_queue_depth); a saturated replica returns once fewer requests than this wait, so it must be above 0")
	resumeQSet := spec.ResumeQueueDepth != nil && good
	switch {
	case !resumeQSet:
		resumeQ = maxQ / 2
	case spec.MaxQueueDepth == nil && resumeQ >= maxQ:
		// The default's ratio: resume at half the maximum.
		maxQ = min(2*resumeQ, math.MaxFloat64)
	}
	if resumeQSet && maxQOK && resumeQ >= maxQ {
		d.errorf(spec.ResumeQueueDepth.Expr.Range(), "Invalid resume threshold",
			"resume_queue_depth %g must be below max_queue_depth %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is half of max_queue_depth).",
			resumeQ, maxQ, where(spec.MaxQueueDepth))
	}

	resumeKV, good := d.numberOr(spec.ResumeKVOccupancy, 0, unitOpen, "Invalid resume threshold",
		" (the default is max_kv_occupancy minus 0.1); a saturated replica returns once its KV occupancy is below this, so it must be above 0, and below max_kv_occupancy, which is at most 1")
	resumeKVSet := spec.ResumeKVOccupancy != nil && good
	switch {
	case !resumeKVSet:
		resumeKV = weights.DefaultResumeKVOccupancy(maxKV)
	case spec.MaxKVOccupancy == nil && resumeKV >= maxKV:
		// The default's margin does not fit below 1: saturate when full.
		maxKV = 1
	}
	if resumeKVSet && maxKVOK && resumeKV >= maxKV {
		d.errorf(spec.ResumeKVOccupancy.Expr.Range(), "Invalid resume threshold",
			"resume_kv_occupancy %g must be below max_kv_occupancy %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is max_kv_occupancy minus 0.1).",
			resumeKV, maxKV, where(spec.MaxKVOccupancy))
	}
	e.MaxQueueDepth, e.ResumeQueueDepth = maxQ, resumeQ
	e.MaxKVOccupancy, e.ResumeKVOccupancy = maxKV, resumeKV

	e.Hold, _ = d.durationOr(spec.Hold, e.Hold, fmt.Sprintf("The default is %q.", weights.DefaultHold.String()))
	e.MaxSaturatedFraction, _ = d.numberOr(spec.MaxSaturatedFraction, e.MaxSaturatedFraction, unitClosed, "Invalid saturated fraction",
		fmt.Sprintf(" (the default is %g); it is the largest fraction of the pool out of the hash table at once", e.MaxSaturatedFraction))
	return e
}

// weights decodes a weights block. max left unset makes room for min and
// levels, and levels left unset fits min..max, so that only values
// written in the file can conflict.
func (d *decoder) weights(spec *weightsSpec) Weights {
	w := weights.DefaultWeighting()
	minOK, maxOK := true, true
	if a := spec.Min; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range")
		w.MinWeight, minOK = uint32(n), good
	}
	levels := 0 // unset
	if a := spec.Levels; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight levels"); good {
			levels = int(n)
		}
	}
	if a := spec.Max; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range")
		w.MaxWeight, maxOK = uint32(n), good
	} else if minOK {
		// As few multipliers as fit: the default, or min, or min and the
		// levels above it, as far as weights.MaxWeightMultiplier allows.
		w.MaxWeight = max(w.MaxWeight, w.MinWeight, min(w.MinWeight+uint32(max(levels, 1))-1, weights.MaxWeightMultiplier))
	}
	rangeOK := minOK && maxOK
	if rangeOK && w.MinWeight > w.MaxWeight { // both set
		d.errorf(spec.Max.Expr.Range(), "Invalid weight range",
			"max %d is below min %d%s; raise max or lower min.", w.MaxWeight, w.MinWeight, where(spec.Min))
		rangeOK = false
	}

	width := 1
	if rangeOK {
		width = int(w.MaxWeight-w.MinWeight) + 1
	}
	w.Levels = min(weights.DefaultLevels, width)
	if levels > 0 {
		w.Levels = levels
		switch {
		case !rangeOK || levels <= width:
		case spec.Max != nil:
			d.errorf(spec.Levels.Expr.Range(), "Invalid weight levels",
				"levels %d is more than the %d weights from min %d to max %d; use levels = %d or less, or widen min..max.",
				levels, width, w.MinWeight, w.MaxWeight, width)
		default: // max was raised as far as it goes
			d.errorf(spec.Levels.Expr.Range(), "Invalid weight levels",
				"levels %d is more than the %d weights from min %d (line %d) to the largest max, %d; use levels = %d or less, or lower min.",
				levels, width, w.MinWeight, spec.Min.Range.Start.Line, w.MaxWeight, width)
		}
	}

	w.Smoothing, _ = d.numberOr(spec.Smoothing, w.Smoothing, unitOpen0, "Invalid smoothing",
		fmt.Sprintf(" (the default is %g); it is the weight of a new observation in the moving average, and 0 would ignore every one", w.Smoothing))
	w.Hysteresis, _ = d.numberOr(spec.Hysteresis, w.Hysteresis, unitOpen1, "Invalid hysteresis",
		fmt.Sprintf(" (the default is %g); it is a fraction of one level's width, and at 1 the top weight could never be reached", w.Hysteresis))
	w.MinChangeInterval, _ = d.durationOr(spec.MinInterval, w.MinChangeInterval,
		fmt.Sprintf("The default is %q.", weights.DefaultMinChangeInterval.String()))
	if a := spec.Relative; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			w.Relative = v.True()
		}
	}
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
