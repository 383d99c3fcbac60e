package policy

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/weights"
)

var update = flag.Bool("update", false, "rewrite testdata/invalid/*.diag from the current output")

func TestValidFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid test files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			p, diags := Load(file)
			if len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n%s", Format(diags))
			}
			if p == nil || p.Filename != file {
				t.Fatalf("Load returned %+v", p)
			}
			if err := checkPolicy(p); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestInvalidFiles compares Format's output for each invalid file with its
// golden .diag file; run `go test ./policy -update` to rewrite them, then
// review that every line:col points at the offending token. A file may
// draw only warnings; its policy must then be returned.
func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".hcl"), func(t *testing.T) {
			p, diags := Load(file)
			switch {
			case len(diags) == 0:
				t.Fatalf("no diagnostics")
			case diags.HasErrors() && p != nil:
				t.Errorf("Load returned a policy despite errors")
			case !diags.HasErrors() && p == nil:
				t.Errorf("Load returned no policy for warnings only")
			}
			for _, d := range diags {
				if d.Subject == nil {
					t.Errorf("diagnostic without a location: %s: %s", d.Summary, d.Detail)
				}
			}
			got := Format(diags)
			golden := strings.TrimSuffix(file, ".hcl") + ".diag"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// The documented defaults, spelled out rather than built from the
// constants, so that a changed constant fails here.
var (
	defaultEscapeValues = weights.Escape{
		MaxQueueDepth:        8,
		MaxKVOccupancy:       0.9,
		MaxPreemptionRate:    0,
		ResumeQueueDepth:     4,
		ResumeKVOccupancy:    0.8,
		Hold:                 30 * time.Second,
		Sustain:              0,
		RelativeQueue:        2,
		RelativeKVMargin:     0.1,
		MaxSaturatedFraction: 0.5,
	}
	defaultWeightsValues = weights.Weighting{MinWeight: 1, MaxWeight: 4, Levels: 4, Smoothing: 0.3, Hysteresis: 0.5, MinChangeInterval: 30 * time.Second}
	// Where the hash block sets balance_factor.
	boundedEscapeValues = func() weights.Escape {
		e := defaultEscapeValues
		e.Sustain = 30 * time.Second // weights.DefaultBoundedSustain
		return e
	}()
	boundedWeightsValues = weights.Weighting{MinWeight: 1, MaxWeight: 1, Levels: 1, Smoothing: 0.3, Hysteresis: 0.5, MinChangeInterval: 30 * time.Second}
	defaultMetricsValues = weights.Metrics{
		Engine:     "vllm",
		Scrape:     weights.Scrape{Interval: 2 * time.Second, Timeout: time.Second},
		StaleAfter: 10 * time.Second,
		Path:       "/metrics",
		Scheme:     "http",
	}
)

// withDefaults fills in the escape and weights blocks every pool has.
// defaultHotKeys is the hot-key settings of a hash block without a
// hot_keys block.
func defaultHotKeys() *fleet.HotKeys {
	h := fleet.DefaultHotKeys()
	return &h
}

func withDefaults(pools ...Pool) []Pool {
	for i := range pools {
		if pools[i].Escape == (weights.Escape{}) {
			pools[i].Escape = defaultEscapeValues
		}
		if pools[i].Weights == (weights.Weighting{}) {
			pools[i].Weights = defaultWeightsValues
		}
		if pools[i].Balancer == "" {
			pools[i].Balancer = fleet.ConsistentHash
		}
		// Every hash block has a keyless setting, and hot keys are on
		// in every hashing pool with a key chain.
		if pools[i].Hash.Algorithm != "" && pools[i].Hash.Keyless == "" {
			pools[i].Hash.Keyless = fleet.DefaultKeyless
		}
		if pools[i].Balancer == fleet.ConsistentHash && len(pools[i].Hash.Keys) > 0 && pools[i].Hash.Hot == nil {
			pools[i].Hash.Hot = defaultHotKeys()
		}
		// Hot keys read their spread sub-key from the body, within
		// the body limit.
		if pools[i].Hash.Hot != nil && pools[i].Hash.MaxBodyBytes == 0 {
			pools[i].Hash.MaxBodyBytes = DefaultMaxBodyBytes
		}
	}
	return pools
}

func TestDecodedValues(t *testing.T) {
	maglevKey := func(headers ...string) fleet.Hash {
		h := fleet.Hash{Algorithm: fleet.Maglev, TableSize: fleet.DefaultMaglevTableSize}
		for _, name := range headers {
			h.Keys = append(h.Keys, fleet.HashKey{Header: name})
		}
		return h
	}
	// metrics returns the default metrics block changed by edit.
	metrics := func(edit func(m *weights.Metrics)) *weights.Metrics {
		m := defaultMetricsValues
		edit(&m)
		return &m
	}
	tests := []struct {
		file string
		want *Policy
	}{
		{"chat.hcl", &Policy{
			XDSAddress:   "127.0.0.1:18000",
			AdminAddress: "127.0.0.1:19000",
			Pools: withDefaults(Pool{
				Name: "chat",
				Settings: fleet.Settings{
					Port:          10000,
					ListenAddress: "0.0.0.0",
					Hash: fleet.Hash{
						Algorithm:     fleet.Maglev,
						TableSize:     65537,
						BalanceFactor: 150,
						Keys:          []fleet.HashKey{{Header: "x-session-id"}, {Header: "x-tenant-id"}},
					},
				},
				Static: []fleet.Endpoint{
					{Host: "127.0.0.1", Port: 8001, Weight: 1},
					{Host: "127.0.0.1", Port: 8002, Weight: 1},
				},
				// balance_factor: the defaults of bounded load.
				Escape:  boundedEscapeValues,
				Weights: boundedWeightsValues,
			}),
		}},
		{"ring_hash.hcl", &Policy{
			XDSAddress:   DefaultXDSAddress,
			AdminAddress: DefaultAdminAddress,
			Pools: withDefaults(Pool{
				Name: "embed",
				Settings: fleet.Settings{
					Port:          10001,
					ListenAddress: "127.0.0.1",
					RouteTimeout:  10 * time.Minute,
					IdleTimeout:   time.Hour,
					Hash: fleet.Hash{
						Algorithm:   fleet.RingHash,
						MinRingSize: 1024,
						MaxRingSize: fleet.MaxRingSize,
						Keyless:     fleet.LeastRequest,
						Keys: []fleet.HashKey{
							{Cookie: "session"},
							{QueryParameter: "session_id"},
							{Header: "x-session-id"},
						},
					},
				},
				Static: []fleet.Endpoint{
					{Host: "::1", Port: 8001, Weight: 1},
					{Host: "10.8.0.12", Port: 8001, Weight: 1},
				},
			}),
		}},
		{"entries_per_weight.hcl", &Policy{
			XDSAddress:   DefaultXDSAddress,
			AdminAddress: DefaultAdminAddress,
			Pools: withDefaults(Pool{
				Name: "chat",
				Settings: fleet.Settings{
					Port:          10000,
					ListenAddress: "0.0.0.0",
					Hash:          fleet.Hash{Algorithm: fleet.RingHash, EntriesPerWeight: 1024, Keys: []fleet.HashKey{{Header: "x-session-id"}}},
				},
				Static: []fleet.Endpoint{
					{Host: "10.0.0.1", Port: 8000, Weight: 1},
					{Host: "10.0.0.2", Port: 8000, Weight: 1},
				},
			}),
		}},
		{"weighted.hcl", &Policy{
			XDSAddress:   DefaultXDSAddress,
			AdminAddress: DefaultAdminAddress,
			Pools: withDefaults(Pool{
				Name: "code",
				Settings: fleet.Settings{
					Port:          10002,
					ListenAddress: "0.0.0.0",
					Hash:          maglevKey("x-session-id"),
				},
				Static: []fleet.Endpoint{
					{Host: "10.0.0.1", Port: 8000, Weight: 1},
					{Host: "10.0.0.2", Port: 8000, Weight: 3, HashKey: "replica-a",
						Locality: fleet.Locality{Region: "eu-west-1", Zone: "eu-west-1a", SubZone: "rack-1"}},
					{Host: "2001:db8::2", Port: 8000, Weight: 128, HashKey: "replica-b"},
					{Host: "10.0.0.3", Port: 8000, Weight: 1},
				},
			}),
		}},
		{"multi_pool.hcl", &Policy{
			XDSAddress:   ":18000",
			AdminAddress: "localhost:19000",
			Pools: withDefaults(
				Pool{Name: "a.small_pool-1", Settings: fleet.Settings{Port: 10011, ListenAddress: "0.0.0.0", Hash: fleet.Hash{Algorithm: fleet.Maglev, TableSize: 251, Keys: []fleet.HashKey{{Header: "x-session-id"}}}}},
				Pool{Name: "m-loopback", Settings: fleet.Settings{Port: 10012, ListenAddress: "127.0.0.1", Hash: maglevKey("x-session-id")}},
				Pool{Name: "m-loopback2", Settings: fleet.Settings{Port: 10012, ListenAddress: "127.0.0.2", Hash: fleet.Hash{Algorithm: fleet.RingHash, Keys: []fleet.HashKey{{Header: "x-session-id"}}}}},
				Pool{Name: "z-large", Settings: fleet.Settings{Port: 10010, ListenAddress: "0.0.0.0", Hash: fleet.Hash{Algorithm: fleet.Maglev, TableSize: fleet.MaxMaglevTableSize, Keyless: fleet.Random, Keys: []fleet.HashKey{{Header: "x-session-id"}}}},
					Static: []fleet.Endpoint{
						{Host: "10.1.0.1", Port: 8000, Weight: 1},
						{Host: "10.1.0.2", Port: 8000, Weight: 1},
						{Host: "10.1.0.3", Port: 8000, Weight: 1},
					}},
			),
		}},
		{"metrics.hcl", &Policy{
			XDSAddress:   DefaultXDSAddress,
			AdminAddress: DefaultAdminAddress,
			Pools: withDefaults(
				Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
					Metrics: &weights.Metrics{
						Engine: weights.EngineVLLM,
						Scrape: weights.Scrape{
							Interval: 500 * time.Millisecond,
							Timeout:  250 * time.Millisecond,
							Model:    "meta-llama/Llama-3.1-8B-Instruct",
						},
						StaleAfter: 5 * time.Second,
						Path:       "/stats/prometheus",
						Port:       8001,
						Scheme:     "https",
					},
					Escape: weights.Escape{
						MaxQueueDepth:        16,
						MaxKVOccupancy:       0.95,
						MaxPreemptionRate:    0.5,
						ResumeQueueDepth:     10,
						ResumeKVOccupancy:    0.85,
						Hold:                 time.Minute,
						RelativeQueue:        1.5,
						RelativeKVMargin:     0,
						MaxSaturatedFraction: 0.25,
					},
					Weights: weights.Weighting{MinWeight: 2, MaxWeight: 8, Levels: 4, Smoothing: 1, Hysteresis: 0, MinChangeInterval: 0},
				},
				Pool{Name: "defaults", Settings: fleet.Settings{Port: 10001, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
					Metrics: metrics(func(*weights.Metrics) {})},
				Pool{Name: "sglang", Settings: fleet.Settings{Port: 10002, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
					Metrics: metrics(func(m *weights.Metrics) {
						m.Engine, m.Interval, m.StaleAfter = weights.EngineSGLang, 3*time.Second, 15*time.Second
					}),
					Escape: weights.Escape{
						MaxQueueDepth:        5,
						MaxKVOccupancy:       0.05,
						ResumeQueueDepth:     2.5,
						ResumeKVOccupancy:    0.01,
						Hold:                 0,
						RelativeQueue:        2,
						RelativeKVMargin:     0.1,
						MaxSaturatedFraction: 0.5,
					},
					Weights: weights.Weighting{MinWeight: 3, MaxWeight: 4, Levels: 2, Smoothing: 0.3, Hysteresis: 0.5, MinChangeInterval: 30 * time.Second},
				},
				Pool{Name: "tgi", Settings: fleet.Settings{Port: 10003, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
					Metrics: metrics(func(m *weights.Metrics) { m.Engine = weights.EngineTGI }),
					Escape: weights.Escape{
						MaxQueueDepth:        8,
						MaxKVOccupancy:       0.05,
						ResumeQueueDepth:     4,
						ResumeKVOccupancy:    0.025, // half of 0.05: 0.05 - 0.1 would be negative
						Hold:                 30 * time.Second,
						RelativeQueue:        2,
						RelativeKVMargin:     0.1,
						MaxSaturatedFraction: 0.5,
					},
					Weights: weights.Weighting{MinWeight: 1, MaxWeight: 128, Levels: 128, Smoothing: 0.3, Hysteresis: 0.5, MinChangeInterval: 30 * time.Second},
				},
				Pool{Name: "trtllm", Settings: fleet.Settings{Port: 10004, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
					Metrics: metrics(func(m *weights.Metrics) {
						m.Engine, m.Interval, m.Timeout, m.StaleAfter = weights.EngineTRTLLM, 100*time.Millisecond, 99*time.Millisecond, 100*time.Millisecond
						m.Path = "/prometheus/metrics" // trtllm-serve's /metrics is JSON
					})},
			),
		}},
		{"custom_engine.hcl", &Policy{
			XDSAddress:   DefaultXDSAddress,
			AdminAddress: DefaultAdminAddress,
			Pools: withDefaults(Pool{Name: "custom", Settings: fleet.Settings{Port: 10000, ListenAddress: "0.0.0.0", Hash: maglevKey("x-session-id")},
				Metrics: metrics(func(m *weights.Metrics) {
					m.Engine, m.Port, m.Model = weights.EngineCustom, 9400, "llama"
					m.Signals = map[string]weights.Series{
						weights.SignalKVOccupancy: {Name: "my_engine_kv_used_ratio", Labels: map[string]string{"device": "gpu"}, Scale: 1},
						weights.SignalQueueDepth:  {Name: "my_engine:queue_length", Scale: 1},
						weights.SignalPreemptions: {Name: "my_engine_preemptions_total", Scale: 1},
						weights.SignalTTFT: {Name: "my_engine_time_to_first_token_milliseconds",
							Labels: map[string]string{"stage": "prefill", "_replica": "a"}, Scale: 0.001},
						weights.SignalPrefixHitRate: {Name: "my_engine_prefix_cache_hit_percent", Scale: 0.01},
					}
				})}),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			file := filepath.Join("testdata", "valid", tt.file)
			got, diags := Load(file)
			if len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n%s", Format(diags))
			}
			tt.want.Filename = file
			if tt.want.XDS == (XDSServer{}) {
				tt.want.XDS = DefaultXDSServer()
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	p, diags := Parse(nil, "empty.hcl")
	if len(diags) > 0 {
		t.Fatalf("unexpected diagnostics:\n%s", Format(diags))
	}
	want := &Policy{Filename: "empty.hcl", XDSAddress: DefaultXDSAddress, AdminAddress: DefaultAdminAddress, XDS: DefaultXDSServer()}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v, want %+v", p, want)
	}
}

// TestDefaultConstants checks that the exported defaults are what the
// decoder applies.
func TestDefaultConstants(t *testing.T) {
	m := weights.Metrics{
		Engine:     weights.DefaultEngine,
		Scrape:     weights.Scrape{Interval: weights.DefaultScrapeInterval, Timeout: weights.DefaultScrapeTimeout},
		StaleAfter: weights.DefaultStaleAfterIntervals * weights.DefaultScrapeInterval,
		Path:       weights.DefaultMetricsPath,
		Scheme:     weights.DefaultMetricsScheme,
	}
	e := weights.Escape{
		MaxQueueDepth:        weights.DefaultMaxQueueDepth,
		MaxKVOccupancy:       weights.DefaultMaxKVOccupancy,
		MaxPreemptionRate:    weights.DefaultMaxPreemptionRate,
		ResumeQueueDepth:     weights.DefaultMaxQueueDepth / 2,
		ResumeKVOccupancy:    weights.DefaultMaxKVOccupancy - weights.DefaultResumeKVMargin,
		Hold:                 weights.DefaultHold,
		Sustain:              weights.DefaultSustain,
		RelativeQueue:        weights.DefaultRelativeQueue,
		RelativeKVMargin:     weights.DefaultRelativeKVMargin,
		MaxSaturatedFraction: weights.DefaultMaxSaturatedFraction,
	}
	w := weights.Weighting{
		MinWeight:         weights.DefaultMinWeight,
		MaxWeight:         weights.DefaultMaxWeight,
		Levels:            weights.DefaultLevels,
		Smoothing:         weights.DefaultSmoothing,
		Hysteresis:        weights.DefaultHysteresis,
		MinChangeInterval: weights.DefaultMinChangeInterval,
	}
	if !reflect.DeepEqual(m, defaultMetricsValues) || e != defaultEscapeValues || w != defaultWeightsValues {
		t.Errorf("constants give\n%+v\n%+v\n%+v\nwant\n%+v\n%+v\n%+v", m, e, w, defaultMetricsValues, defaultEscapeValues, defaultWeightsValues)
	}
	if got := weights.DefaultEscape(); got != defaultEscapeValues {
		t.Errorf("weights.DefaultEscape() = %+v, want %+v", got, defaultEscapeValues)
	}
	if got := weights.DefaultWeighting(); got != defaultWeightsValues {
		t.Errorf("weights.DefaultWeighting() = %+v, want %+v", got, defaultWeightsValues)
	}
	if got := weights.DefaultEscapeFor(true); got != boundedEscapeValues {
		t.Errorf("weights.DefaultEscapeFor(true) = %+v, want %+v", got, boundedEscapeValues)
	}
	if got := weights.DefaultWeightingFor(true); got != boundedWeightsValues {
		t.Errorf("weights.DefaultWeightingFor(true) = %+v, want %+v", got, boundedWeightsValues)
	}
	if weights.DefaultEscapeFor(false) != defaultEscapeValues || weights.DefaultWeightingFor(false) != defaultWeightsValues {
		t.Error("the defaults without bounded load differ from DefaultEscape and DefaultWeighting")
	}
	// A pool with empty metrics, escape and weights blocks runs Step with
	// the scraper's own defaults.
	want := weights.Config{Weighting: defaultWeightsValues, Escape: defaultEscapeValues, StaleAfter: defaultMetricsValues.StaleAfter}
	if got := weights.DefaultConfig(); got != want {
		t.Errorf("weights.DefaultConfig() = %+v, want %+v", got, want)
	}
}

// TestEscapeWithoutMetrics checks that the warning keeps the policy.
func TestEscapeWithoutMetrics(t *testing.T) {
	src := []byte(`
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  escape  { max_queue_depth = 4 }
  weights {}
}
`)
	p, diags := Parse(src, "warn.hcl")
	if p == nil || diags.HasErrors() || len(diags) != 2 {
		t.Fatalf("Parse = %v,\n%s\nwant a policy and two warnings", p, Format(diags))
	}
	for _, d := range diags {
		if d.Severity != hcl.DiagWarning {
			t.Errorf("not a warning: %s", Format(hcl.Diagnostics{d}))
		}
	}
	if got := p.Pools[0]; got.Metrics != nil || got.Escape.MaxQueueDepth != 4 || got.Escape.ResumeQueueDepth != 2 {
		t.Errorf("pool = %+v", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "nope.hcl")
	p, diags := Load(name)
	if p != nil || !diags.HasErrors() {
		t.Fatalf("Load(%q) = %v, %v; want an error", name, p, diags)
	}
	if got := Format(diags); !strings.Contains(got, name) || !strings.HasPrefix(got, "Cannot read policy file: ") {
		t.Errorf("Format = %q; want the file name and the cause", got)
	}
}

func TestFormat(t *testing.T) {
	rng := &hcl.Range{Filename: "p.hcl", Start: hcl.Pos{Line: 3, Column: 7, Byte: 30}}
	diags := hcl.Diagnostics{
		{Severity: hcl.DiagError, Summary: "Bad thing", Detail: "Fix it\nlike this.", Subject: rng},
		{Severity: hcl.DiagWarning, Summary: "Odd thing", Detail: "Consider it.", Subject: rng},
		{Severity: hcl.DiagError, Summary: "No place"},
	}
	want := "p.hcl:3:7: Bad thing: Fix it like this.\n" +
		"p.hcl:3:7: warning: Odd thing: Consider it.\n" +
		"No place\n"
	if got := Format(diags); got != want {
		t.Errorf("Format =\n%s\nwant\n%s", got, want)
	}
}

func TestParseHostPort(t *testing.T) {
	tests := []struct {
		in        string
		emptyHost bool
		want      string // canonical form, or "" for an error
		summary   string // expected error summary
	}{
		{"127.0.0.1:8001", false, "127.0.0.1:8001", ""},
		{"[::1]:8001", false, "[::1]:8001", ""},
		{"[0:0::1]:8001", false, "[::1]:8001", ""},
		{"Host.Example:80", false, "host.example:80", ""},
		{"svc_name:80", false, "svc_name:80", ""},
		{":18000", true, ":18000", ""},
		{":18000", false, "", "Invalid address"},
		{"127.0.0.1", false, "", "Invalid address"},
		{"[::1]", false, "", "Invalid address"},
		{"::1:8001", false, "", "Invalid address"},
		{"[10.0.0.1]:80", false, "", "Invalid address"},
		{"[fe80::1%eth0]:80", false, "", "Invalid address"},
		{"10.0.0.300:80", false, "", "Invalid address"},
		{"-bad.example:80", false, "", "Invalid address"},
		{"a..b:80", false, "", "Invalid address"},
		{"127.0.0.1:0", false, "", "Invalid port"},
		{"127.0.0.1:65536", false, "", "Invalid port"},
		{"127.0.0.1:http", false, "", "Invalid port"},
		{"127.0.0.1:", false, "", "Invalid port"},
	}
	for _, tt := range tests {
		hp, err := parseHostPort(tt.in, tt.emptyHost)
		switch {
		case tt.want != "" && err != nil:
			t.Errorf("parseHostPort(%q) failed: %v", tt.in, err)
		case tt.want != "" && hp.String() != tt.want:
			t.Errorf("parseHostPort(%q) = %s, want %s", tt.in, hp, tt.want)
		case tt.want == "" && err == nil:
			t.Errorf("parseHostPort(%q) = %s, want an error", tt.in, hp)
		case tt.want == "" && err.(*addrError).summary != tt.summary:
			t.Errorf("parseHostPort(%q) error %v, want summary %q", tt.in, err, tt.summary)
		}
	}
}

func TestPrimes(t *testing.T) {
	for _, tt := range []struct {
		n          uint64
		prime      bool
		prev, next uint64
	}{
		{65536, false, 65521, 65537},
		{65537, true, 65521, 65539},
		{4, false, 3, 5},
		{fleet.MaxMaglevTableSize, true, 4999999, 5000077},
	} {
		if fleet.IsPrime(tt.n) != tt.prime || prevPrime(tt.n) != tt.prev || nextPrime(tt.n) != tt.next {
			t.Errorf("%d: prime=%v prev=%d next=%d, want %v %d %d",
				tt.n, fleet.IsPrime(tt.n), prevPrime(tt.n), nextPrime(tt.n), tt.prime, tt.prev, tt.next)
		}
	}
}

// FuzzParse checks that Parse never panics, and that a policy it accepts
// holds its invariants.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/valid/*.hcl", "testdata/invalid/*.hcl"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, diags := Parse(src, "fuzz.hcl")
		if diags.HasErrors() {
			if p != nil {
				t.Fatal("policy returned with errors")
			}
			return
		}
		if err := checkPolicy(p); err != nil {
			t.Fatal(err)
		}
	})
}

// checkPolicy checks the invariants of an accepted policy: every value
// within the ranges the data planes and the weights package accept, and
// every pair of related values consistent.
func checkPolicy(p *Policy) error {
	if xds, admin := mustHostPort(p.XDSAddress), mustHostPort(p.AdminAddress); xds.overlaps(admin) {
		return fmt.Errorf("overlapping xds and admin addresses accepted: %s, %s", p.XDSAddress, p.AdminAddress)
	}
	for i, pool := range p.Pools {
		if i > 0 && p.Pools[i-1].Name >= pool.Name {
			return fmt.Errorf("pools not sorted or not unique: %q, %q", p.Pools[i-1].Name, pool.Name)
		}
		if pool.Port == 0 || pool.Port > 65535 {
			return fmt.Errorf("invalid pool accepted: %+v", pool)
		}
		if h := pool.Hash; pool.Balancer == fleet.ConsistentHash {
			if len(h.Keys) == 0 {
				return fmt.Errorf("hash pool without keys accepted: %+v", pool)
			}
			if (h.Algorithm == fleet.Maglev) != fleet.IsPrime(h.TableSize) {
				return fmt.Errorf("bad table size accepted: %+v", h)
			}
			// The data planes default the minimum and reject a maximum
			// below it.
			if h.MaxRingSize != 0 && cmp.Or(h.MinRingSize, fleet.DefaultMinRingSize) > h.MaxRingSize {
				return fmt.Errorf("ring sizes the data planes reject accepted: %+v", h)
			}
		}
		for _, ep := range pool.Static {
			if ep.Weight < 1 || ep.Weight > fleet.MaxEndpointWeight || ep.Port == 0 || ep.Host == "" {
				return fmt.Errorf("invalid endpoint accepted: %+v", ep)
			}
		}
		if m := pool.Metrics; m != nil {
			if m.Interval < weights.MinScrapeInterval || m.Timeout <= 0 || m.Timeout >= m.Interval || m.StaleAfter < m.Interval ||
				!strings.HasPrefix(m.Path, "/") || (m.Engine == weights.EngineCustom) != (len(m.Signals) > 0) {
				return fmt.Errorf("invalid metrics accepted: %+v", m)
			}
			for name, src := range m.Signals {
				if checkMetricName(src.Name) != nil || !(src.Scale > 0) || !slices.Contains(weights.SignalNames(), name) {
					return fmt.Errorf("invalid signal %q accepted: %+v", name, src)
				}
			}
		}
		e, w := pool.Escape, pool.Weights
		if !(e.MaxQueueDepth > 0 && !math.IsInf(e.MaxQueueDepth, 0) && e.ResumeQueueDepth > 0 && e.ResumeQueueDepth < e.MaxQueueDepth &&
			e.MaxKVOccupancy > 0 && e.MaxKVOccupancy <= 1 && e.ResumeKVOccupancy > 0 && e.ResumeKVOccupancy < e.MaxKVOccupancy &&
			e.MaxPreemptionRate >= 0 && e.Hold >= 0 && e.MaxSaturatedFraction >= 0 && e.MaxSaturatedFraction <= 1) {
			return fmt.Errorf("invalid escape accepted: %+v", e)
		}
		if !(w.MinWeight >= 1 && w.MinWeight <= w.MaxWeight && w.MaxWeight <= weights.MaxWeightMultiplier && w.Levels >= 1 && w.Levels <= int(w.MaxWeight-w.MinWeight)+1 &&
			w.Smoothing > 0 && w.Smoothing <= 1 && w.Hysteresis >= 0 && w.Hysteresis < 1 && w.MinChangeInterval >= 0) {
			return fmt.Errorf("invalid weights accepted: %+v", w)
		}
	}
	return nil
}
