package weights

import (
	"maps"
	"slices"
	"testing"
)

// The registry and the profiles cannot drift apart: every built-in engine
// has a profile and every profile is registered, and every signal has a
// distinct place in a Profile.
func TestRegistry(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(builtinProfiles)), slices.Sorted(slices.Values(BuiltinEngines())); !slices.Equal(got, want) {
		t.Errorf("profiles %v, registered engines %v", got, want)
	}
	for _, e := range Engines() {
		var signals map[string]Series
		if e == EngineCustom {
			signals = map[string]Series{SignalKVOccupancy: {Name: "m"}}
		}
		if _, err := ProfileFor(e, signals); err != nil {
			t.Errorf("ProfileFor(%q): %v", e, err)
		}
	}
	var p Profile
	seen := map[*[]Series]string{}
	for _, s := range signalSlots {
		slot := s.slot(&p)
		if prev, ok := seen[slot]; ok {
			t.Errorf("signals %q and %q share a slot", prev, s.name)
		}
		seen[slot] = s.name
	}
	if len(CoreSignalNames()) == 0 {
		t.Error("no core signal")
	}
}

func TestProfileFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		engine  string
		signals map[string]Series
		check   func(*Profile) bool
		wantErr bool
	}{
		{name: "builtin", engine: EngineVLLM, check: func(p *Profile) bool { return p.Name == "vllm" && len(p.KVOccupancy) > 0 }},
		{name: "custom", engine: EngineCustom, signals: map[string]Series{
			SignalKVOccupancy: {Name: "kv_used", Scale: 0.01},
			SignalTTFT:        {Name: "ttft_seconds", Labels: map[string]string{"model": "m"}},
		}, check: func(p *Profile) bool {
			return len(p.KVOccupancy) == 1 && p.KVOccupancy[0].Name == "kv_used" && p.KVOccupancy[0].Scale == 0.01 &&
				len(p.TTFT) == 1 && p.TTFT[0].Labels["model"] == "m" && p.QueueDepth == nil
		}},
		{name: "custom without a core signal", engine: EngineCustom, signals: map[string]Series{SignalTTFT: {Name: "t"}}, wantErr: true},
		{name: "unknown signal", engine: EngineCustom, signals: map[string]Series{"kv": {Name: "t"}}, wantErr: true},
		{name: "signals on a builtin", engine: EngineTGI, signals: map[string]Series{SignalRunning: {Name: "r"}}, wantErr: true},
		{name: "unknown engine", engine: "ollama", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ProfileFor(tc.engine, tc.signals)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && !tc.check(p) {
				t.Errorf("profile %+v", p)
			}
		})
	}
}

// A metrics block's path defaults to the engine's Prometheus page.
func TestMetricsPath(t *testing.T) {
	for _, tc := range []struct{ engine, want string }{
		{EngineVLLM, "/metrics"},
		{EngineSGLang, "/metrics"},
		{EngineTGI, "/metrics"},
		{EngineTRTLLM, "/prometheus/metrics"}, // its /metrics is JSON
		{EngineCustom, DefaultMetricsPath},
		{"unknown", DefaultMetricsPath},
	} {
		if got := MetricsPath(tc.engine); got != tc.want {
			t.Errorf("MetricsPath(%q) = %q, want %q", tc.engine, got, tc.want)
		}
	}
}
