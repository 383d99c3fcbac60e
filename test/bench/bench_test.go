package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

// TestEndToEnd replays a few seconds of chat on 4 simulated replicas
// through grpc-go xDS clients and an in-process kvxds, once with round
// robin and once with session affinity, and checks the engines' own
// counters and the written outputs.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end benchmark run; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := Config{
		Workloads: []string{"chat"},
		Replicas:  4,
		Load:      0.5,
		Duration:  24 * time.Second,
		TimeScale: 3,
		Modes:     []Mode{RoundRobin, KVXDS, UpperBound},
		// Pure hashing: with nothing changing no session may move.
		Bare: true,
		Out:  dir,
	}
	rep, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != 1 {
		t.Fatalf("got %d workload reports, want 1", len(rep.Workloads))
	}
	wr := rep.Workloads[0]
	rr, _ := wr.Mode(RoundRobin)
	kv, _ := wr.Mode(KVXDS)
	ub, _ := wr.Mode(UpperBound)
	t.Logf("%d requests; hit rate round_robin %.3f, kvxds %.3f, upper bound %.3f; TTFT p95 %.3fs vs %.3fs; CPU %.2f / %.2f cores",
		wr.Requests, rr.HitRate, kv.HitRate, ub.HitRate, rr.ClientTTFT.P95, kv.ClientTTFT.P95, rr.CPUCores, kv.CPUCores)
	for _, m := range []ModeResult{rr, kv} {
		if m.Failed != 0 {
			t.Errorf("%s: %d requests failed", m.Mode, m.Failed)
		}
		if m.QueryToks <= 0 {
			t.Errorf("%s: the engines counted no prefix-cache queries", m.Mode)
		}
		if math.Abs(m.HitRate-m.ClientHitRate) > 0.05 {
			t.Errorf("%s: engine hit rate %.3f and the trailers' %.3f disagree", m.Mode, m.HitRate, m.ClientHitRate)
		}
	}
	if !(kv.HitRate > rr.HitRate) {
		t.Errorf("kvxds hit rate %.3f does not exceed round robin's %.3f", kv.HitRate, rr.HitRate)
	}
	if kv.SessionsMoved != 0 {
		t.Errorf("kvxds moved %d sessions between replicas with nothing changing", kv.SessionsMoved)
	}

	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## chat", "| round_robin |", "| kvxds |", "| upper-bound |"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	f, err := os.Open(filepath.Join(dir, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || len(rows[0]) != len(csvHeader()) {
		t.Errorf("results.csv has %d rows, want a header and 3 of %d columns", len(rows), len(csvHeader()))
	}
	if len(wr.Charts) < 4 {
		t.Errorf("got charts %v, want hit rate, TTFT and two queue charts", wr.Charts)
	}
	for _, path := range wr.Charts {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is only %v", path, b)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	// 10 observations ≤ 1, 10 more in (1, 2], none above.
	h := Histogram{Bounds: []float64{1, 2, 4}, Counts: []float64{10, 20, 20}, Count: 20}
	for _, tc := range []struct{ q, want float64 }{
		{0.25, 0.5}, {0.5, 1}, {0.75, 1.5}, {1, 2},
	} {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	// A rank in the +Inf bucket gives the highest finite bound.
	h.Count = 40
	if got := h.Quantile(0.99); got != 4 {
		t.Errorf("Quantile in +Inf = %v, want 4", got)
	}
	if got := (Histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram quantile = %v, want NaN", got)
	}
	// Merging and subtracting keep bucket counts.
	a := EngineCounters{PrefixQueries: 10, PrefixHits: 5, TTFT: Histogram{Bounds: []float64{1, 2}, Counts: []float64{1, 3}, Count: 4}}
	b := EngineCounters{PrefixQueries: 30, PrefixHits: 25, TTFT: Histogram{Bounds: []float64{1, 2}, Counts: []float64{2, 2}, Count: 3}}
	s := a.Add(b)
	if s.HitRate() != 0.75 || s.TTFT.Counts[0] != 3 || s.TTFT.Counts[1] != 5 || s.TTFT.Count != 7 {
		t.Errorf("Add = %+v", s)
	}
	if d := s.Sub(a); d.PrefixQueries != 30 || d.TTFT.Counts[1] != 2 || d.TTFT.Count != 3 {
		t.Errorf("Sub = %+v", d)
	}
}

func TestScrapeEngine(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.KVBlocks = 100
	r, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := ScrapeEngine(context.Background(), httpClient(), r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefixQueries != 0 || len(c.TTFT.Bounds) == 0 {
		t.Errorf("fresh replica: %+v", c)
	}
}

func TestEchoReplies(t *testing.T) {
	for _, name := range []string{"chat", "agent"} {
		g, _ := workload.ByName(name)
		raw := g.Generate(3, 5, 60*time.Second)
		reqs, err := PrepareRequests(raw, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		deps := 0
		for i, r := range reqs {
			if r.Tokens != wordCount(raw[i].Prompt) {
				t.Fatalf("%s: request %d has %d tokens after echoing, %d before", name, i, r.Tokens, wordCount(raw[i].Prompt))
			}
			if len(sim.Tokenize(r.Prompt)) != r.Tokens {
				t.Fatalf("%s: request %d: Tokenize gives %d tokens, want %d", name, i, len(sim.Tokenize(r.Prompt)), r.Tokens)
			}
			d := r.DependsOn
			if d < 0 {
				continue
			}
			deps++
			dep := reqs[d]
			want := dep.Prompt + sim.OutputText(sim.Tokenize(dep.Prompt), dep.MaxTokens) + " "
			if !strings.HasPrefix(r.Prompt, want) {
				t.Fatalf("%s: request %d does not start with request %d's prompt and the engine's reply", name, i, d)
			}
		}
		if deps == 0 {
			t.Fatalf("%s: no dependent requests to check", name)
		}
	}
}

// Every workload replays with echoed replies; a branch re-sends the
// engine's replies of the history it shares (a regenerated reply, its
// dependency's prompt as sent).
func TestEchoRepliesEveryWorkload(t *testing.T) {
	for _, name := range workload.Names() {
		g, _ := workload.ByName(name)
		raw := g.Generate(3, 5, 60*time.Second)
		reqs, err := PrepareRequests(raw, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, r := range reqs {
			if r.DependsOn < 0 {
				continue
			}
			found := false
			for d := r.DependsOn; d >= 0 && !found; d = reqs[d].DependsOn {
				dep := reqs[d]
				found = r.Prompt == dep.Prompt ||
					strings.HasPrefix(r.Prompt, dep.Prompt+sim.OutputText(sim.Tokenize(dep.Prompt), dep.MaxTokens))
			}
			if !found {
				t.Fatalf("%s: request %d re-sends no earlier reply of its dependency chain", name, i)
			}
		}
	}
}

func TestPolicies(t *testing.T) {
	for _, bare := range []bool{false, true} {
		for _, scale := range []float64{10, 40} {
			for _, m := range append(AllModes(), OptionalModes()...) {
				if !m.Live() || m == KVXDSHashedDecode { // P/D only: TestPDPolicies
					continue
				}
				text, err := Policy(PolicyOptions{Mode: m, Endpoints: []string{"127.0.0.1:8001", "127.0.0.1:8002"},
					TimeScale: scale, Scrape: 250 * time.Millisecond, Escape: DefaultEscape().Resolve(6),
					GroupKey: "tenant-0", GroupReplicas: 1, Bare: bare})
				if err != nil {
					t.Fatal(err)
				}
				p, diags := policy.Parse([]byte(text), string(m)+".hcl")
				if diags.HasErrors() {
					t.Errorf("%s: generated policy is invalid:\n%s\n%s", m, policy.Format(diags), text)
					continue
				}
				if len(p.Pools) != 1 {
					t.Errorf("%s: %d pools", m, len(p.Pools))
					continue
				}
				if groups := len(p.Pools[0].Groups); groups != 0 != (m == KVXDSGroups) {
					t.Errorf("%s: %d groups", m, groups)
				}
				if lora := p.Pools[0].LoRA; (lora != nil) != (m == KVXDSAdapters) {
					t.Errorf("%s: adapters %v", m, lora)
				}
				deployed := strings.Contains(text, DeployedBlocksSet(scale, m == KVXDSBounded, nil, nil))
				if want := m.Deployable() && !bare; deployed != want {
					t.Errorf("%s, bare %v: documented blocks %v, want %v:\n%s", m, bare, deployed, want, text)
				}
			}
		}
	}
}

// The documented durations are engine time, divided by the time scale
// into kvxds's wall time; the interval stays at kvxds's minimum or above.
func TestDeployedBlocks(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		want  []string
	}{
		{1, []string{`interval    = "2s"`, `timeout     = "1s"`, `stale_after = "10s"`, `hold = "30s"`, `min_interval = "30s"`}},
		{5, []string{`interval    = "400ms"`, `timeout     = "200ms"`, `stale_after = "2s"`, `hold = "6s"`, `min_interval = "6s"`}},
		{40, []string{`interval    = "100ms"`, `timeout     = "50ms"`, `stale_after = "500ms"`, `hold = "750ms"`}},
	} {
		text := DeployedBlocks(tc.scale)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("time scale %g: no %s in\n%s", tc.scale, w, text)
			}
		}
		if strings.Contains(text, "max_queue_depth") || strings.Contains(text, "levels") || strings.Contains(text, "sustain") {
			t.Errorf("time scale %g: a threshold is written instead of left at its default:\n%s", tc.scale, text)
		}
	}
	// With a balance_factor sustain's default is 30s of engine time, and
	// a set duration replaces the written default.
	if text := DeployedBlocksSet(10, true, nil, nil); !strings.Contains(text, `sustain = "3s"`) {
		t.Errorf("bounded at time scale 10: no sustain = \"3s\" in\n%s", text)
	}
	text := DeployedBlocksSet(10, true, []string{`sustain = "1s"`, `hold = "2s"`}, []string{`min_interval = "5s"`, "max = 1"})
	for _, w := range []string{`sustain = "1s"`, `hold = "2s"`, `min_interval = "5s"`, "max = 1"} {
		if strings.Count(text, strings.Fields(w)[0]+" ") != 1 || !strings.Contains(text, w) {
			t.Errorf("set %s: not written once in\n%s", w, text)
		}
	}
}

func TestCapacity(t *testing.T) {
	c := sim.DefaultConfig()
	c.KVBlocks = 1000 // 16,000 tokens: 10 sequences of 1,600
	s := Shape{MeanPrompt: 1000, MeanOutput: 600}
	work := 1000/c.PrefillTokensPerSec + 600*(c.DecodePerSeq.Seconds()+c.DecodeStepBase.Seconds()/10)
	if got, want := Capacity(c, s), 1/work; math.Abs(got-want) > 1e-9 {
		t.Errorf("Capacity = %v, want %v", got, want)
	}
}

func TestParseModes(t *testing.T) {
	ms, err := ParseModes("kvxds, round_robin,kvxds")
	if err != nil || len(ms) != 2 || ms[0] != KVXDS || ms[1] != RoundRobin {
		t.Errorf("ParseModes = %v, %v", ms, err)
	}
	if _, err := ParseModes("random"); err == nil {
		t.Error("ParseModes accepted an unknown mode")
	}
	if ms, _ := ParseModes("all"); len(ms) != len(AllModes()) {
		t.Errorf("all = %v", ms)
	}
}

// Progress written to a log is one plain line per report, never a line
// rewritten with carriage returns.
func TestProgressLines(t *testing.T) {
	for _, live := range []bool{false, true} {
		var buf strings.Builder
		var mu sync.Mutex
		g := &dispatcher{cfg: Config{Progress: lockedWriter{&mu, &buf}, ProgressLive: live, ProgressEvery: 20 * time.Millisecond},
			plan: &workloadPlan{Name: "chat"}, mode: KVXDS}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); g.progressLoop(time.Now(), stop) }()
		time.Sleep(110 * time.Millisecond)
		close(stop)
		<-done
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		lines := strings.Count(out, "\n")
		switch {
		case !live && (strings.Contains(out, "\r") || lines < 2):
			t.Errorf("log progress %q: want plain lines", out)
		case live && (lines != 0 || !strings.HasPrefix(out, "\r")):
			t.Errorf("terminal progress %q: want one rewritten line", out)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestHotSession(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sessions []string
		want     string
	}{
		{"none", []string{"", ""}, ""},
		{"busiest", []string{"a", "b", "b", "", "a", "b"}, "b"},
		{"tie: smallest", []string{"b", "a", "b", "a"}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reqs []Request
			for _, s := range tc.sessions {
				reqs = append(reqs, Request{Request: workload.Request{Session: s}})
			}
			if got := hotSession(reqs); got != tc.want {
				t.Errorf("hotSession = %q, want %q", got, tc.want)
			}
		})
	}
}

// The groups mode's weights reach its policy: MIN to MIN+N-1 in N levels,
// at most one move per replica every 10 simulated seconds, relative or
// not; one level keeps the escape hatch's.
func TestGroupWeightLevels(t *testing.T) {
	for _, tc := range []struct {
		levels        int
		min, max      uint32
		n             int
		wantIntervalS float64
	}{
		{1, 1, 2, 2, 30},
		{4, 1, 4, 4, 10},
		{6, 2, 7, 6, 10}, // and relative
	} {
		const scale = 10
		e := DefaultEscape().Resolve(6).WithWeights(tc.levels, int(tc.min), tc.levels == 6)
		text, err := Policy(PolicyOptions{Mode: KVXDSGroups, Endpoints: []string{"127.0.0.1:8001", "127.0.0.1:8002"},
			TimeScale: scale, Scrape: 250 * time.Millisecond, Escape: e, GroupKey: "tenant-0", GroupReplicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		p, diags := policy.Parse([]byte(text), "groups.hcl")
		if diags.HasErrors() {
			t.Fatalf("levels %d: %s", tc.levels, policy.Format(diags))
		}
		w := p.Pools[0].Weights
		if w.MinWeight != tc.min || w.MaxWeight != tc.max || w.Levels != tc.n {
			t.Errorf("levels %d: weights %d–%d in %d levels, want %d–%d in %d", tc.levels, w.MinWeight, w.MaxWeight, w.Levels, tc.min, tc.max, tc.n)
		}
		if w.Relative != (tc.levels == 6) {
			t.Errorf("levels %d: relative %t", tc.levels, w.Relative)
		}
		if got := w.MinChangeInterval.Seconds() * scale; math.Abs(got-tc.wantIntervalS) > 1e-6 {
			t.Errorf("levels %d: min_interval %v simulated seconds, want %v", tc.levels, got, tc.wantIntervalS)
		}
	}
}

// A body-keyed mode writes --balance-factor only away from the default a
// body key gets, and its deployed escape block then carries the bounded
// sustain.
func TestBodyKeyBalanceFactor(t *testing.T) {
	for _, tc := range []struct {
		factor int
		want   string
	}{{125, "balance_factor = 125"}, {200, "balance_factor = 200"}, {policy.DefaultPromptPrefixBalanceFactor, ""}} {
		text, err := Policy(PolicyOptions{Mode: KVXDSPrefix, Endpoints: []string{"127.0.0.1:8001"}, TimeScale: 10,
			Scrape: 250 * time.Millisecond, BodyKey: "prompt_prefix = 2048", BalanceFactor: tc.factor})
		if err != nil {
			t.Fatal(err)
		}
		p, diags := policy.Parse([]byte(text), "prefix.hcl")
		if diags.HasErrors() {
			t.Fatalf("%s\n%s", policy.Format(diags), text)
		}
		if got := p.Pools[0].Hash.BalanceFactor; got != uint32(tc.factor) || (tc.want != "") != strings.Contains(text, "balance_factor") {
			t.Errorf("factor %d: decoded %d, written %v:\n%s", tc.factor, got, strings.Contains(text, "balance_factor"), text)
		}
		if !strings.Contains(text, DeployedBlocksSet(10, true, nil, nil)) || p.Pools[0].Escape.Sustain != 3*time.Second {
			t.Errorf("factor %d: sustain %v, want 3s (30s of engine time):\n%s", tc.factor, p.Pools[0].Escape.Sustain, text)
		}
	}
}
