package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/fleet"

	"github.com/kvxds/kvxds/weights"
)

// poolWith is a policy of one hash pool holding blocks.
func poolWith(blocks string) string {
	return `pool "p" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
` + blocks + "\n}\n"
}

// TestDefaultsFollowSetValues checks that a default which would conflict
// with a value written in the file follows it instead.
func TestDefaultsFollowSetValues(t *testing.T) {
	metrics := func(edit func(m *weights.Metrics)) *weights.Metrics {
		m := defaultMetricsValues
		edit(&m)
		return &m
	}
	escape := func(edit func(e *weights.Escape)) weights.Escape {
		e := defaultEscapeValues
		edit(&e)
		return e
	}
	weighting := func(edit func(w *weights.Weighting)) weights.Weighting {
		w := defaultWeightsValues
		edit(&w)
		return w
	}
	ringHash := func(minRing, maxRing uint64) fleet.Hash {
		return fleet.Hash{Algorithm: fleet.RingHash, MinRingSize: minRing, MaxRingSize: maxRing,
			Keyless: fleet.DefaultKeyless, Keys: []fleet.HashKey{{Header: "x-session-id"}}, Hot: defaultHotKeys(), MaxBodyBytes: DefaultMaxBodyBytes}
	}
	hashBlock := func(attrs string) string {
		return `pool "p" {
  port = 10000
  hash {
    ` + attrs + `
    key { header = "x-session-id" }
  }
}
`
	}
	pool := func(p *Policy) any { return p.Pools[0] }
	poolMetrics := func(p *Policy) any { return p.Pools[0].Metrics }
	poolEscape := func(p *Policy) any { return p.Pools[0].Escape }
	poolWeights := func(p *Policy) any { return p.Pools[0].Weights }
	poolHash := func(p *Policy) any { return p.Pools[0].Hash }
	addresses := func(p *Policy) any { return [2]string{p.XDSAddress, p.AdminAddress} }

	tests := []struct {
		name string
		src  string
		got  func(*Policy) any
		want any
	}{
		// timeout: the shorter of 1s and half the interval.
		{"interval 1s", poolWith(`metrics {
  engine   = "vllm"
  interval = "1s"
}`), poolMetrics, metrics(func(m *weights.Metrics) {
			m.Interval, m.Timeout, m.StaleAfter = time.Second, 500*time.Millisecond, 5*time.Second
		})},
		{"shortest interval", poolWith(`metrics { interval = "100ms" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 100*time.Millisecond, 50*time.Millisecond, 500*time.Millisecond
			})},
		{"interval 1.5s", poolWith(`metrics { interval = "1500ms" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 1500*time.Millisecond, 750*time.Millisecond, 7500*time.Millisecond
			})},
		{"interval 3s keeps timeout 1s", poolWith(`metrics { interval = "3s" }`), poolMetrics,
			metrics(func(m *weights.Metrics) { m.Interval, m.StaleAfter = 3*time.Second, 15*time.Second })},
		{"empty timeout is unset", poolWith(`metrics {
  interval = "1s"
  timeout  = ""
}`), poolMetrics, metrics(func(m *weights.Metrics) {
			m.Interval, m.Timeout, m.StaleAfter = time.Second, 500*time.Millisecond, 5*time.Second
		})},

		// path: the engine's Prometheus page; a path written wins.
		{"trtllm path", poolWith(`metrics { engine = "trtllm" }`), poolMetrics,
			metrics(func(m *weights.Metrics) { m.Engine, m.Path = weights.EngineTRTLLM, "/prometheus/metrics" })},
		{"trtllm path written", poolWith(`metrics {
  engine = "trtllm"
  path   = "/proxied/metrics"
}`), poolMetrics, metrics(func(m *weights.Metrics) { m.Engine, m.Path = weights.EngineTRTLLM, "/proxied/metrics" })},
		{"sglang path", poolWith(`metrics { engine = "sglang" }`), poolMetrics,
			metrics(func(m *weights.Metrics) { m.Engine = weights.EngineSGLang })},

		// interval: 2s, or twice a timeout that does not fit, at most stale_after.
		{"timeout 1.5s keeps interval 2s", poolWith(`metrics { timeout = "1500ms" }`), poolMetrics,
			metrics(func(m *weights.Metrics) { m.Timeout = 1500 * time.Millisecond })},
		{"timeout 2s", poolWith(`metrics { timeout = "2s" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 4*time.Second, 2*time.Second, 20*time.Second
			})},
		{"timeout 5s", poolWith(`metrics { timeout = "5s" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 10*time.Second, 5*time.Second, 50*time.Second
			})},
		{"stale_after 1s", poolWith(`metrics { stale_after = "1s" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = time.Second, 500*time.Millisecond, time.Second
			})},
		{"stale_after 100ms", poolWith(`metrics { stale_after = "100ms" }`), poolMetrics,
			metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 100*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond
			})},
		{"timeout and stale_after", poolWith(`metrics {
  timeout     = "3s"
  stale_after = "5s"
}`), poolMetrics, metrics(func(m *weights.Metrics) {
			m.Interval, m.Timeout, m.StaleAfter = 5*time.Second, 3*time.Second, 5*time.Second
		})},
		{"timeout with a long stale_after", poolWith(`metrics {
  timeout     = "3s"
  stale_after = "1m"
}`), poolMetrics, metrics(func(m *weights.Metrics) {
			m.Interval, m.Timeout, m.StaleAfter = 6*time.Second, 3*time.Second, time.Minute
		})},

		// engine: custom when signal blocks name the metrics.
		{"signal blocks", poolWith(`metrics {
  signal "queue_depth" { metric = "my_engine_queue" }
}`), poolMetrics, metrics(func(m *weights.Metrics) {
			m.Engine = weights.EngineCustom
			m.Signals = map[string]weights.Series{weights.SignalQueueDepth: {Name: "my_engine_queue", Scale: 1}}
		})},

		// escape: a maximum left unset makes room for its resume value.
		{"resume_queue_depth 10", poolWith(`metrics {}
escape { resume_queue_depth = 10 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxQueueDepth, e.ResumeQueueDepth = 20, 10 })},
		{"resume_queue_depth 8", poolWith(`metrics {}
escape { resume_queue_depth = 8 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxQueueDepth, e.ResumeQueueDepth = 16, 8 })},
		{"resume_queue_depth 3 keeps the maximum", poolWith(`metrics {}
escape { resume_queue_depth = 3 }`), poolEscape, escape(func(e *weights.Escape) { e.ResumeQueueDepth = 3 })},
		{"max_queue_depth 1", poolWith(`metrics {}
escape { max_queue_depth = 1 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxQueueDepth, e.ResumeQueueDepth = 1, 0.5 })},
		{"resume_kv_occupancy 0.9", poolWith(`metrics {}
escape { resume_kv_occupancy = 0.9 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxKVOccupancy, e.ResumeKVOccupancy = 1, 0.9 })},
		{"resume_kv_occupancy 0.95", poolWith(`metrics {}
escape { resume_kv_occupancy = 0.95 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxKVOccupancy, e.ResumeKVOccupancy = 1, 0.95 })},
		{"resume_kv_occupancy 0.5 keeps the maximum", poolWith(`metrics {}
escape { resume_kv_occupancy = 0.5 }`), poolEscape, escape(func(e *weights.Escape) { e.ResumeKVOccupancy = 0.5 })},
		{"max_kv_occupancy 0.1", poolWith(`metrics {}
escape { max_kv_occupancy = 0.1 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxKVOccupancy, e.ResumeKVOccupancy = 0.1, 0.05 })},
		{"max_kv_occupancy 0.15", poolWith(`metrics {}
escape { max_kv_occupancy = 0.15 }`), poolEscape, escape(func(e *weights.Escape) { e.MaxKVOccupancy, e.ResumeKVOccupancy = 0.15, 0.05 })},

		// weights: max left unset makes room for min and levels.
		{"min 8", poolWith(`metrics {}
weights { min = 8 }`), poolWeights, weighting(func(w *weights.Weighting) { w.MinWeight, w.MaxWeight, w.Levels = 8, 8, 1 })},
		{"min 3 keeps max 4", poolWith(`metrics {}
weights { min = 3 }`), poolWeights, weighting(func(w *weights.Weighting) { w.MinWeight, w.Levels = 3, 2 })},
		{"levels 8", poolWith(`metrics {}
weights { levels = 8 }`), poolWeights, weighting(func(w *weights.Weighting) { w.MaxWeight, w.Levels = 8, 8 })},
		{"min 2 levels 6", poolWith(`metrics {}
weights {
  min    = 2
  levels = 6
}`), poolWeights, weighting(func(w *weights.Weighting) { w.MinWeight, w.MaxWeight, w.Levels = 2, 7, 6 })},
		{"min 100 levels 29", poolWith(`metrics {}
weights {
  min    = 100
  levels = 29
}`), poolWeights, weighting(func(w *weights.Weighting) { w.MinWeight, w.MaxWeight, w.Levels = 100, 128, 29 })},
		{"max 2", poolWith(`metrics {}
weights { max = 2 }`), poolWeights, weighting(func(w *weights.Weighting) { w.MaxWeight, w.Levels = 2, 2 })},
		{"relative", poolWith(`metrics {}
weights { relative = true }`), poolWeights, weighting(func(w *weights.Weighting) { w.Relative = true })},

		// hash: ring sizes make a ring, and a small maximum lowers the
		// data planes' minimum.
		{"min_ring_size alone", hashBlock(`min_ring_size = 2048`), poolHash, ringHash(2048, 0)},
		{"max_ring_size alone", hashBlock(`max_ring_size = 512`), poolHash, ringHash(512, 512)},
		{"ring_hash max_ring_size 512", hashBlock(`algorithm = "ring_hash"
    max_ring_size = 512`), poolHash, ringHash(512, 512)},
		{"ring_hash max_ring_size 4096", hashBlock(`algorithm = "ring_hash"
    max_ring_size = 4096`), poolHash, ringHash(0, 4096)},

		// addresses: the unset one moves to the other's default.
		{"admin on the xds default", `admin { address = "127.0.0.1:18000" }`, addresses,
			[2]string{"127.0.0.1:19000", "127.0.0.1:18000"}},
		{"xds on the admin default", `xds { address = "127.0.0.1:19000" }`, addresses,
			[2]string{"127.0.0.1:19000", "127.0.0.1:18000"}},
		{"admin on every interface", `admin { address = "0.0.0.0:18000" }`, addresses,
			[2]string{"127.0.0.1:19000", "0.0.0.0:18000"}},
		{"admin on every IPv6 interface", `admin { address = "[::]:18000" }`, addresses,
			[2]string{"127.0.0.1:19000", "[::]:18000"}},
		{"xds on every interface", `xds { address = ":19000" }`, addresses,
			[2]string{":19000", "127.0.0.1:18000"}},
		{"admin on another host", `admin { address = "127.0.0.2:18000" }`, addresses,
			[2]string{"127.0.0.1:18000", "127.0.0.2:18000"}},

		// Where Envoy's bounded load acts (balance_factor set), the escape
		// hatch waits 30s and the weights stay at min, unless written.
		{"bounded load: sustain", hashBlock(`balance_factor = 150`) + `pool "q" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
}
`, func(p *Policy) any { return [2]weights.Escape{p.Pools[0].Escape, p.Pools[1].Escape} },
			[2]weights.Escape{escape(func(e *weights.Escape) { e.Sustain = 30 * time.Second }), defaultEscapeValues}},
		{"bounded load: static weights", hashBlock(`balance_factor = 150`), poolWeights,
			weighting(func(w *weights.Weighting) { w.MaxWeight, w.Levels = 1, 1 })},
		{"bounded load: written values stand", `pool "p" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    balance_factor = 125
  }
  metrics {}
  escape { sustain = "0s" }
  weights { max = 4 }
}
`, func(p *Policy) any { return [2]any{p.Pools[0].Escape, p.Pools[0].Weights} }, [2]any{defaultEscapeValues, defaultWeightsValues}},
		{"bounded load: levels raise max", `pool "p" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    balance_factor = 125
  }
  metrics {}
  weights { levels = 3 }
}
`, poolWeights, weighting(func(w *weights.Weighting) { w.MaxWeight, w.Levels = 3, 3 })},

		{"everything follows", poolWith(`metrics { interval = "500ms" }
escape { resume_queue_depth = 12 }
weights { min = 5 }`), pool, Pool{
			Name: "p", Settings: fleet.Settings{
				Port:          10000,
				ListenAddress: fleet.DefaultListenAddress,
				Balancer:      fleet.ConsistentHash,
				Hash: fleet.Hash{Algorithm: fleet.Maglev, TableSize: fleet.DefaultMaglevTableSize, Keyless: fleet.DefaultKeyless,
					Keys: []fleet.HashKey{{Header: "x-session-id"}}, Hot: defaultHotKeys(), MaxBodyBytes: DefaultMaxBodyBytes},
			},
			Metrics: metrics(func(m *weights.Metrics) {
				m.Interval, m.Timeout, m.StaleAfter = 500*time.Millisecond, 250*time.Millisecond, 2500*time.Millisecond
			}),
			Escape:  escape(func(e *weights.Escape) { e.MaxQueueDepth, e.ResumeQueueDepth = 24, 12 }),
			Weights: weighting(func(w *weights.Weighting) { w.MinWeight, w.MaxWeight, w.Levels = 5, 5, 1 }),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, diags := Parse([]byte(tt.src), "p.hcl")
			if len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n%s", Format(diags))
			}
			if err := checkPolicy(p); err != nil {
				t.Fatal(err)
			}
			if got := tt.got(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// setting is one attribute of a block and values it may take, each valid
// on its own.
type setting struct {
	name   string
	values []string
}

// TestOnlyWrittenValuesConflict writes every combination of the given
// values of a block's related settings (each one also left unset), and
// checks that a single setting never draws a diagnostic, that every error
// points into a setting the file holds, and that what is accepted holds
// the policy's invariants.
func TestOnlyWrittenValuesConflict(t *testing.T) {
	blocks := []struct {
		wrap     func(attrs string) string
		settings []setting
	}{
		{func(a string) string { return poolWith("metrics {\n" + a + "}") }, []setting{
			{"interval", []string{`"100ms"`, `"1s"`, `"2s"`, `"3s"`, `"1m"`}},
			{"timeout", []string{`"50ms"`, `"999ms"`, `"1s"`, `"2s"`, `"5s"`}},
			{"stale_after", []string{`"100ms"`, `"1s"`, `"4s"`, `"10s"`, `"1h"`}},
		}},
		{func(a string) string { return poolWith("metrics {}\nescape {\n" + a + "}") }, []setting{
			{"max_queue_depth", []string{"0.5", "1", "8", "20"}},
			{"resume_queue_depth", []string{"0.25", "4", "8", "10"}},
			{"max_kv_occupancy", []string{"0.05", "0.5", "0.9", "1"}},
			{"resume_kv_occupancy", []string{"0.01", "0.5", "0.9", "0.99"}},
		}},
		{func(a string) string { return poolWith("metrics {}\nweights {\n" + a + "}") }, []setting{
			{"min", []string{"1", "4", "8", "100", "128"}},
			{"max", []string{"1", "4", "8", "128"}},
			{"levels", []string{"1", "4", "8", "29", "128"}},
		}},
		{func(a string) string {
			return "pool \"p\" {\n  port = 10000\n  hash {\n" + a + "    key { header = \"x\" }\n  }\n}\n"
		}, []setting{
			{"algorithm", []string{`"maglev"`, `"ring_hash"`}},
			{"table_size", []string{"65537"}},
			{"min_ring_size", []string{"1", "512", "4096"}},
			{"max_ring_size", []string{"1", "512", "4096"}},
		}},
		{func(a string) string { return a }, []setting{
			{"xds", []string{`"127.0.0.1:18000"`, `"127.0.0.1:19000"`, `":18000"`, `"0.0.0.0:19000"`, `"[::]:18000"`}},
			{"admin", []string{`"127.0.0.1:18000"`, `"127.0.0.1:19000"`, `":19000"`, `"[::1]:18000"`}},
		}},
	}
	for _, b := range blocks {
		for _, combo := range combinations(b.settings) {
			var src strings.Builder
			for i, v := range combo {
				switch {
				case v == "":
				case b.settings[0].name == "xds": // blocks of their own
					fmt.Fprintf(&src, "%s { address = %s }\n", b.settings[i].name, v)
				default:
					fmt.Fprintf(&src, "    %s = %s\n", b.settings[i].name, v)
				}
			}
			text := b.wrap(src.String())
			p, diags := Parse([]byte(text), "p.hcl")
			if err := checkConflicts(text, b.settings, combo, p, diags); err != nil {
				t.Errorf("%v\n%s", err, text)
			}
		}
	}
}

func checkConflicts(text string, settings []setting, combo []string, p *Policy, diags hcl.Diagnostics) error {
	var written []string
	for i, v := range combo {
		if v != "" {
			written = append(written, settings[i].name)
		}
	}
	if len(written) <= 1 && len(diags) > 0 {
		return fmt.Errorf("a single setting drew diagnostics:\n%s", Format(diags))
	}
	lines := strings.Split(text, "\n")
	for _, d := range diags {
		line := strings.TrimSpace(lines[d.Subject.Start.Line-1])
		if d.Severity == hcl.DiagError && !slices.ContainsFunc(written, func(name string) bool { return strings.HasPrefix(line, name+" ") }) {
			return fmt.Errorf("error not at a written setting:\n%s", Format(hcl.Diagnostics{d}))
		}
	}
	if p != nil {
		return checkPolicy(p)
	}
	return nil
}

// combinations returns every choice of one value or none ("") per
// setting.
func combinations(settings []setting) [][]string {
	out := [][]string{nil}
	for _, s := range settings {
		var next [][]string
		for _, c := range out {
			for _, v := range append([]string{""}, s.values...) {
				next = append(next, append(append([]string(nil), c...), v))
			}
		}
		out = next
	}
	return out
}

// A prompt_prefix key sets balance_factor by default, and with it the
// escape and weights defaults of bounded load.
func TestBoundedDefaultsFromPromptPrefix(t *testing.T) {
	p, diags := Parse([]byte(`pool "p" {
  port = 10000
  hash {
    key { prompt_prefix = 2048 }
  }
  metrics {}
}
`), "p.hcl")
	if diags.HasErrors() {
		t.Fatalf("unexpected errors:\n%s", Format(diags))
	}
	pool := p.Pools[0]
	if pool.Hash.BalanceFactor != DefaultPromptPrefixBalanceFactor || pool.Escape.Sustain != 30*time.Second ||
		pool.Weights.MaxWeight != 1 || pool.Weights.Levels != 1 {
		t.Errorf("balance_factor %d, sustain %v, weights %d..%d in %d levels; want %d, 30s, 1..1 in 1",
			pool.Hash.BalanceFactor, pool.Escape.Sustain, pool.Weights.MinWeight, pool.Weights.MaxWeight, pool.Weights.Levels,
			DefaultPromptPrefixBalanceFactor)
	}
}

// A body key's default bound is looser where the filters learn the fleet
// table that tells them which keys are new, and Envoy's 150 where not.
func TestBodyKeyBalanceFactorDefault(t *testing.T) {
	for _, tc := range []struct {
		name, hash string
		want       uint32
	}{
		{"prompt bytes, a table", `key { prompt_prefix = 2048 }`, DefaultPromptPrefixBalanceFactor},
		{"conversation, a table", `key { conversation = true }`, DefaultPromptPrefixBalanceFactor},
		{"requests", "key { prompt_prefix = 2048 }\n    balance_on = \"requests\"", DefaultUntabledBalanceFactor},
		{"no table", "key { prompt_prefix = 2048 }\n    load_interval = \"0s\"", DefaultUntabledBalanceFactor},
		{"set", "key { prompt_prefix = 2048 }\n    balance_on = \"requests\"\n    balance_factor = 300", 300},
		{"a header key", `key { header = "x-session-id" }`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := Parse([]byte("pool \"p\" {\n  port = 10000\n  hash {\n    "+tc.hash+"\n  }\n}\n"), "p.hcl")
			if diags.HasErrors() {
				t.Fatalf("unexpected errors:\n%s", Format(diags))
			}
			if got := p.Pools[0].Hash.BalanceFactor; got != tc.want {
				t.Errorf("balance_factor %d, want %d", got, tc.want)
			}
		})
	}
}

// A prefill pool keyed on headers alone is bounded by default, loosely and
// on prompt bytes with a load table, taking the escape defaults of
// bounded load and keeping the weights defaults of an unbounded pool; a
// pool no prefill block names, one that sets
// balance_factor or balance_on, or one whose filters get no table
// (load_interval = "0s") keeps what it says or none.
func TestPrefillBalanceFactorDefault(t *testing.T) {
	for _, tc := range []struct {
		name, pool, hash string
		factor           uint32
		on               string
		interval         time.Duration
	}{
		{"a prefill pool", "p-prefill", `key { header = "x-session-id" }`, DefaultPrefillBalanceFactor, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval},
		{"a pool no prefill block names", "other", `key { header = "x-session-id" }`, 0, "", 0},
		{"off", "p-prefill", "key { header = \"x-session-id\" }\n    balance_factor = 0", 0, "", 0},
		{"set", "p-prefill", "key { header = \"x-session-id\" }\n    balance_factor = 150", 150, "", 0},
		{"on requests", "p-prefill", "key { header = \"x-session-id\" }\n    balance_on = \"requests\"", 0, fleet.BalanceOnRequests, 0},
		{"no table", "p-prefill", "key { header = \"x-session-id\" }\n    load_interval = \"0s\"", 0, "", 0},
		{"a prompt_prefix key", "p-prefill", `key { prompt_prefix = 2048 }`, DefaultPromptPrefixBalanceFactor, fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fmt.Sprintf(`pool "p" {
  port = 10000
  load_balancing = "least_request"
  prefill { pool = "p-prefill" }
  static {
    endpoint "10.0.0.1:8000" {}
  }
}

pool %q {
  port = 10001
  hash {
    %s
  }
  static {
    endpoint "10.0.1.1:8000" {}
  }
}
`, tc.pool, tc.hash)
			p, diags := Parse([]byte(src), "p.hcl")
			if tc.pool != "p-prefill" {
				// The decode pool names a pool that does not exist.
				if !diags.HasErrors() {
					t.Fatal("a prefill block naming no pool was accepted")
				}
				p, diags = Parse([]byte(strings.Replace(src, `  prefill { pool = "p-prefill" }`+"\n", "", 1)), "p.hcl")
			}
			if diags.HasErrors() {
				t.Fatalf("unexpected errors:\n%s", Format(diags))
			}
			var h fleet.Hash
			var pool Pool
			for _, q := range p.Pools {
				if q.Name == tc.pool {
					h, pool = q.Hash, q
				}
			}
			if h.BalanceFactor != tc.factor || h.BalanceOn != tc.on || h.LoadInterval != tc.interval {
				t.Errorf("balance_factor %d on %q every %v; want %d on %q every %v", h.BalanceFactor, h.BalanceOn, h.LoadInterval, tc.factor, tc.on, tc.interval)
			}
			// The loose default takes a bounded pool's escape hatch and
			// keeps an unbounded pool's weights: gRPC clients balance the
			// pool's ring by weight.
			if bounded := tc.factor > 0; bounded != (pool.Escape.Sustain == 30*time.Second) {
				t.Errorf("bounded %v, but sustain %v", bounded, pool.Escape.Sustain)
			}
			if static := tc.factor > 0 && tc.factor != DefaultPrefillBalanceFactor; static != (pool.Weights.MaxWeight == 1) {
				t.Errorf("static weights %v, but weights up to %d", static, pool.Weights.MaxWeight)
			}
		})
	}
}
