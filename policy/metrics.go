package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/weights"
)

// metricsSpec is a metrics block; its presence turns scraping on.
type metricsSpec struct {
	DefRange   hcl.Range      `hcl:",def_range"`
	Engine     *hcl.Attribute `hcl:"engine,optional"`
	Interval   *hcl.Attribute `hcl:"interval,optional"`
	Timeout    *hcl.Attribute `hcl:"timeout,optional"`
	StaleAfter *hcl.Attribute `hcl:"stale_after,optional"`
	Path       *hcl.Attribute `hcl:"path,optional"`
	Port       *hcl.Attribute `hcl:"port,optional"`
	Scheme     *hcl.Attribute `hcl:"scheme,optional"`
	Model      *hcl.Attribute `hcl:"model,optional"`
	Signals    []signalSpec   `hcl:"signal,block"`
}

func (s metricsSpec) defRange() hcl.Range { return s.DefRange }

func (d *decoder) metrics(spec *metricsSpec) *weights.Metrics {
	m := new(weights.Metrics)
	*m = weights.DefaultMetrics()

	known := true // whether m.Engine is what the user asked for
	if a := spec.Engine; a != nil {
		var engine string
		engine, known = enum(d, a, nil, "Unknown engine", func(s string) string {
			return fmt.Sprintf(`%q is not an engine kvxds knows; use %s, or "custom" with signal blocks naming its metrics.`, s, quotedList(slices.DeleteFunc(weights.Engines(), func(e string) bool { return e == weights.EngineCustom }), "or"))
		}, weights.Engines()...)
		if known {
			m.Engine = engine
		}
	} else if len(spec.Signals) > 0 {
		// Signal blocks only apply to a custom engine.
		m.Engine = weights.EngineCustom
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
	if m.Path == "" {
		// The engine's own page: trtllm-serve's /metrics is JSON.
		m.Path = weights.MetricsPath(m.Engine)
	} else if m.Engine == weights.EngineTRTLLM && m.Path == weights.DefaultMetricsPath {
		// Valid, and wrong for every trtllm-serve: say so where it is set.
		d.warnf(spec.Path.Expr.Range(), "Not a Prometheus page",
			"trtllm-serve answers %s with JSON iteration stats, which kvxds cannot read; its Prometheus page is %q, the default with engine = %q: remove path.",
			m.Path, weights.MetricsPath(m.Engine), m.Engine)
	}
	if a := spec.Port; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); good {
			m.Port = uint32(n)
		}
	}
	if a := spec.Scheme; a != nil {
		if s, good := enum(d, a, nil, "Invalid scheme", func(s string) string {
			return fmt.Sprintf(`scheme %q is not supported; use "http" or "https".`, s)
		}, "http", "https"); good {
			m.Scheme = s
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

	m.Signals = d.signals(spec, known && m.Engine == weights.EngineCustom)
	if known && m.Engine != weights.EngineCustom {
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
func (d *decoder) timing(m *weights.Metrics, spec *metricsSpec) {
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
				stale, interval, spec.Interval.Range.Start.Line, weights.DefaultStaleAfterIntervals, weights.DefaultStaleAfter(interval))
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
		timeout = weights.DefaultTimeout(interval)
	}
	if !staleSet {
		stale = weights.DefaultStaleAfter(interval)
	}
	m.Interval, m.Timeout, m.StaleAfter = interval, timeout, stale
}

// saturatingMul returns d·n (n > 0), or the longest duration if that
// overflows: intervals of centuries are valid.
func saturatingMul(d time.Duration, n int64) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
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

// signalSpec is a signal block of a custom engine. metric is required,
// but checked by hand so that the diagnostic names the signal.
type signalSpec struct {
	Name      string         `hcl:"name,label"`
	NameRange hcl.Range      `hcl:"name,label_range"`
	DefRange  hcl.Range      `hcl:",def_range"`
	Metric    *hcl.Attribute `hcl:"metric,optional"`
	Labels    *hcl.Attribute `hcl:"labels,optional"`
	Scale     *hcl.Attribute `hcl:"scale,optional"`
}

// signals decodes the signal blocks of a metrics block. custom says the
// engine is known to be custom, which requires a core signal.
func (d *decoder) signals(spec *metricsSpec, custom bool) map[string]weights.Series {
	out := map[string]weights.Series{}
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

func (d *decoder) signalSource(sb *signalSpec) (weights.Series, bool) {
	src := weights.Series{Scale: weights.DefaultSignalScale}
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
