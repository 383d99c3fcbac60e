package weights

import (
	"fmt"
	"math"
	"slices"
)

// The engines kvxds scrapes: the values of a policy's metrics { engine }.
// Every built-in engine has a profile (BuiltinProfile); a custom engine
// names its metrics signal by signal (CustomProfile).
const (
	EngineVLLM   = "vllm" // V1 and V0 metric names
	EngineSGLang = "sglang"
	EngineTGI    = "tgi"
	EngineTRTLLM = "trtllm"
	EngineCustom = "custom"
)

// The signals a profile maps: the labels of a policy's signal blocks.
const (
	SignalQueueDepth    = "queue_depth"
	SignalRunning       = "running"
	SignalKVOccupancy   = "kv_occupancy"
	SignalPreemptions   = "preemptions"
	SignalPrefixQueries = "prefix_queries"
	SignalPrefixHits    = "prefix_hits"
	SignalPrefixHitRate = "prefix_hit_rate"
	SignalTTFT          = "ttft"
)

// builtinEngines lists the built-in engines in the order diagnostics name
// them (the most common first).
var builtinEngines = []string{EngineVLLM, EngineSGLang, EngineTGI, EngineTRTLLM}

// signalSlot is the registry of signals: each one's name, whether it is a
// core signal (weights and the escape hatch are computed from those; a
// custom engine needs at least one), and its place in a Profile. The
// order is the order diagnostics list them, core signals first.
type signalSlot struct {
	name string
	core bool
	slot func(*Profile) *[]Series
}

var signalSlots = []signalSlot{
	{SignalQueueDepth, true, func(p *Profile) *[]Series { return &p.QueueDepth }},
	{SignalRunning, true, func(p *Profile) *[]Series { return &p.Running }},
	{SignalKVOccupancy, true, func(p *Profile) *[]Series { return &p.KVOccupancy }},
	{SignalPreemptions, false, func(p *Profile) *[]Series { return &p.Preemptions }},
	{SignalPrefixQueries, false, func(p *Profile) *[]Series { return &p.PrefixQueries }},
	{SignalPrefixHits, false, func(p *Profile) *[]Series { return &p.PrefixHits }},
	{SignalPrefixHitRate, false, func(p *Profile) *[]Series { return &p.PrefixHitRate }},
	{SignalTTFT, false, func(p *Profile) *[]Series { return &p.TTFT }},
}

// Engines returns every engine name a policy may use: the built-in ones,
// then EngineCustom.
func Engines() []string { return append(slices.Clone(builtinEngines), EngineCustom) }

// SignalNames returns every signal name, core signals first.
func SignalNames() []string {
	out := make([]string, len(signalSlots))
	for i, s := range signalSlots {
		out[i] = s.name
	}
	return out
}

// CoreSignalNames returns the signals weights and the escape hatch are
// computed from.
func CoreSignalNames() []string {
	var out []string
	for _, s := range signalSlots {
		if s.core {
			out = append(out, s.name)
		}
	}
	return out
}

// CustomProfile builds the profile of a custom engine from one series per
// signal name.
func CustomProfile(name string, signals map[string]Series) (*Profile, error) {
	p := &Profile{Name: name}
	core := false
	for sig, s := range signals {
		i := slices.IndexFunc(signalSlots, func(x signalSlot) bool { return x.name == sig })
		if i < 0 {
			return nil, fmt.Errorf("custom engine %q: unknown signal %q", name, sig)
		}
		*signalSlots[i].slot(p) = cloneSeries([]Series{s})
		core = core || signalSlots[i].core
	}
	if !core {
		return nil, fmt.Errorf("custom engine %q: no core signal (one of %v)", name, CoreSignalNames())
	}
	return p, nil
}

// MetricsPath returns where an engine serves its Prometheus page, the
// default of a metrics block's path: "/prometheus/metrics" for trtllm-serve
// (whose /metrics answers JSON), DefaultMetricsPath for the others.
func MetricsPath(engine string) string {
	if p, ok := builtinProfiles[engine]; ok && p.MetricsPath != "" {
		return p.MetricsPath
	}
	return DefaultMetricsPath
}

// MissingSignals returns the core signals p maps that s lacks: what a
// page did not export although its engine can (trtllm-serve's queue
// without enable_iter_perf_stats), in registry order. Weights and the
// escape hatch then judge by the others alone.
func MissingSignals(p *Profile, s Signals) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, c := range []struct {
		name   string
		mapped bool
		v      float64
	}{
		{SignalQueueDepth, len(p.QueueDepth) > 0, s.QueueDepth},
		{SignalRunning, len(p.Running) > 0, s.Running},
		{SignalKVOccupancy, len(p.KVOccupancy) > 0, s.KVOccupancy},
	} {
		if c.mapped && math.IsNaN(c.v) {
			out = append(out, c.name)
		}
	}
	return out
}

// ProfileFor returns the profile of an engine: the built-in one, or for
// EngineCustom the one its signals describe.
func ProfileFor(engine string, signals map[string]Series) (*Profile, error) {
	if engine == EngineCustom {
		return CustomProfile(engine, signals)
	}
	if len(signals) > 0 {
		return nil, fmt.Errorf("engine %q: signals apply only to a custom engine", engine)
	}
	p, ok := BuiltinProfile(engine)
	if !ok {
		return nil, fmt.Errorf("unknown engine %q (want one of %v)", engine, Engines())
	}
	return p, nil
}
