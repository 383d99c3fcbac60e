package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/policy"
)

func TestParsePD(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PD
		ok   bool
	}{
		{"4:4", PD{4, 4}, true},
		{" 2 : 6 ", PD{2, 6}, true},
		{"4", PD{}, false},
		{"0:4", PD{}, false},
		{"4:-1", PD{}, false},
		{"a:b", PD{}, false},
	} {
		got, err := ParsePD(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePD(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Every P/D mode's policy loads as kvxds loads it, and only the kvxds
// modes link the decode pool to its prefill pool.
func TestPDPolicies(t *testing.T) {
	for _, m := range []Mode{RoundRobin, LeastRequest, KVXDS, KVXDSHashedDecode, Index} {
		for _, key := range []string{`header = "x-session-id"`, "prompt_prefix = 2048", "conversation = true"} {
			for _, bare := range []bool{false, true} {
				for _, bf := range []int{0, 300} {
					src, err := PDPolicy(PDPolicyOptions{Mode: m, Prefill: []string{"127.0.0.1:1", "127.0.0.1:2"},
						Decode: []string{"127.0.0.1:3"}, Key: key, MinBodyBytes: 100, BalanceFactor: bf, TimeScale: 5, Scrape: time.Second, Bare: bare})
					if err != nil {
						t.Fatal(err)
					}
					pol, diags := policy.Parse([]byte(src), "pd.hcl")
					if diags.HasErrors() {
						t.Fatalf("%s, %s: %s\n%s", m, key, policy.Format(diags), src)
					}
					if len(pol.Pools) != 2 {
						t.Fatalf("%s: %d pools", m, len(pol.Pools))
					}
					header := strings.HasPrefix(key, "header")
					// The policy's default factor: a header key's
					// prefill pool is bounded loosely on prompt bytes.
					wantBF := uint32(bf)
					switch {
					case bf > 0:
					case header:
						wantBF = policy.DefaultPrefillBalanceFactor
					default:
						wantBF = policy.DefaultPromptPrefixBalanceFactor
					}
					pf, pp := pol.Pools[0].Prefill, pol.Pools[1]
					if kv := m == KVXDS || m == KVXDSHashedDecode; kv != (pf != nil) {
						t.Errorf("%s: prefill block %+v", m, pf)
					} else if kv && (pf.Pool != PrefillPoolName || pf.MinBodyBytes != 100) {
						t.Errorf("%s: prefill block %+v", m, pf)
					} else if kv && pp.Hash.BalanceFactor != wantBF {
						t.Errorf("%s, %s: prefill pool balance factor %d, want %d", m, key, pp.Hash.BalanceFactor, wantBF)
					} else if want := time.Duration(0); kv {
						// A prefill pool bounding prompt bytes learns its
						// load each simulated second, as deployed, and
						// holds its replicas' weights as a bounded pool,
						// but under a header key's loose default.
						if !header || bf == 0 {
							want = time.Second / 5
						}
						if got := pp.Hash.LoadInterval; got != want {
							t.Errorf("%s, %s, factor %d: prefill pool load_interval %s, want %s", m, key, bf, got, want)
						}
						if static := pp.Weights.MaxWeight == 1; !bare && static != (!header || bf > 0) {
							t.Errorf("%s, %s, factor %d: prefill pool weights up to %d", m, key, bf, pp.Weights.MaxWeight)
						}
					}
				}
			}
		}
	}
	if _, err := PDPolicy(PDPolicyOptions{Mode: KVXDSWeights}); err == nil {
		t.Error("kvxds+weights rendered a P/D policy")
	}
}

func TestP2CRouter(t *testing.T) {
	x := newP2CRouter(4, 1)
	// With three replicas busy, the idle one wins whenever it is drawn:
	// half the picks of two distinct replicas out of four.
	for i := range 3 {
		x.load[i] = 5
	}
	idle := 0
	for range 400 {
		i := x.Pick()
		if i == 3 {
			idle++
		}
		x.Done(i)
	}
	if idle < 160 || idle > 240 {
		t.Errorf("the idle replica took %d of 400 picks, want about 200", idle)
	}
}

// TestPDEnvoy replays a few hundred chat requests on a small P/D fleet
// through two simulated Envoys running the decode listener's real Lua
// filters: under kvxds every session prefills on one prefill replica (the
// table is stable: no metrics), every request whose body reaches
// min_body_bytes carries the prefill header to its decode replica and is
// prefilled remotely, the shorter ones locally, and the report has the
// P/D columns.
func TestPDEnvoy(t *testing.T) {
	requireLuaJIT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, q, key := pdTestPlan(t, Envoy, 30*time.Second, RoundRobin, KVXDS, UpperBound)
	// min_body_bytes between the shortest bodies and the rest: the
	// filters see the chat body's length (content-length).
	lens := make([]int, len(q.Requests))
	for i := range q.Requests {
		lens[i] = len(KeyBody(&q.Requests[i]))
	}
	sorted := slices.Sorted(slices.Values(lens))
	c.PDMinBodyBytes = sorted[len(sorted)/10] + 1

	run, err := runPD(ctx, c, q, KVXDS, key)
	if err != nil {
		t.Fatal(err)
	}
	prefilledOn := map[string]string{}
	local, remote := 0, 0
	for i, res := range run.Results {
		r := &q.Requests[i]
		checkPDResult(t, r, res)
		short := lens[i] < c.PDMinBodyBytes
		switch {
		case short && res.PD.Replica != "":
			t.Errorf("request %d: a %d-byte body (below %d) prefilled on %s", r.Seq, lens[i], c.PDMinBodyBytes, res.PD.Replica)
		case !short && res.PD.Replica == "":
			t.Errorf("request %d: a %d-byte body prefilled locally: the prefill header did not reach its decode replica", r.Seq, lens[i])
		case short:
			local++
		default:
			remote++
			checkPDRemote(t, r, res)
			if was, ok := prefilledOn[r.Session]; ok && was != res.PD.Replica {
				t.Errorf("session %s prefilled on %s and %s", r.Session, was, res.PD.Replica)
			}
			prefilledOn[r.Session] = res.PD.Replica
		}
	}
	if local == 0 || remote < 100 {
		t.Errorf("%d local and %d remote prefills; want some of each", local, remote)
	}
	if d := run.After.Sub(run.Before); d.PDLocalFailed != 0 || d.PDRemote == 0 {
		t.Errorf("engine counters: %+v", d)
	}
	owners := map[string]bool{}
	for _, o := range prefilledOn {
		owners[o] = true
	}
	if len(owners) != 2 {
		t.Errorf("sessions prefilled on %v; want both prefill replicas", owners)
	}

	// The report: a round robin run for the ratios, the P/D columns.
	rrRun, err := runPD(ctx, c, q, RoundRobin, key)
	if err != nil {
		t.Fatal(err)
	}
	kv, rr := summarizePD(KVXDS, q, run, c.PD), summarizePD(RoundRobin, q, rrRun, c.PD)
	if kv.PD.PrefillSessionsMoved != 0 || kv.PD.PrefillSessions == 0 || rr.PD.PrefillSessionsMoved == 0 {
		t.Errorf("prefill keys moved: kvxds %d of %d, round robin %d", kv.PD.PrefillSessionsMoved, kv.PD.PrefillSessions, rr.PD.PrefillSessionsMoved)
	}
	if !(kv.PD.PrefillHitRate > rr.PD.PrefillHitRate) || kv.PD.LocalNoHeader == 0 || rr.PD.LocalNoHeader != 0 {
		t.Errorf("kvxds %+v, round robin %+v", *kv.PD, *rr.PD)
	}
	// The prefill replicas' own TTFT, from the decode replicas' headers:
	// some of the replicas' whole.
	for _, m := range []ModeResult{kv, rr} {
		if p := m.PD; !(p.PrefillTTFT.P50 > 0) || !(p.PrefillTTFT.P95 < p.ReplicaTTFT.P95) {
			t.Errorf("%s TTFT: prefill %v, replicas %v", m.Mode, p.PrefillTTFT, p.ReplicaTTFT)
		}
	}
	wr := &WorkloadReport{Name: "chat", DataPlane: Envoy, Replicas: c.Replicas, PD: c.PD, PDKey: SessionHeader,
		Modes: []ModeResult{rr, kv, PrefillUpperBound(q.Requests, q.Warmup, c.PD.Prefill, q.KVBlocks, simConfig(q.KVBlocks, 1))}}
	wr.Targets = Targets(wr)
	var md bytes.Buffer
	(&Report{Config: c, Workloads: []WorkloadReport{*wr}}).Markdown(&md)
	for _, want := range []string{"## chat, envoy data plane, prefill/decode 2:2", "| mode | prefill hit rate | × RR |",
		"TTFT p95 (replicas: all / prefill)", "TPOT p50 / p95", "balance: prefill / decode", "prefills: remote / local (no header, failed)",
		"KV transferred per request", "| upper-bound |", "chat-envoy-pd2x2 | kvxds client TTFT p95 ≤ 0.5 × round_robin",
		"kvxds TPOT p95 ≤ round_robin's"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md.String())
		}
	}
	var out bytes.Buffer
	if err := (&Report{Workloads: []WorkloadReport{*wr}}).CSV(&out); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(rows[0], "prefill_hit_rate")
	if len(rows) != 4 || col < 0 || rows[2][col] == "" || !slices.Contains(rows[0], "tpot_p95_s") || !slices.Contains(rows[0], "replica_ttft_p95_s") ||
		!slices.Contains(rows[0], "prefill_ttft_p95_s") {
		t.Errorf("results.csv: %v", rows)
	}
	t.Logf("prefill hit rate %.3f (round robin %.3f), TTFT p95 %s (%s), TPOT p95 %s (%s), %d local of %d",
		kv.PD.PrefillHitRate, rr.PD.PrefillHitRate, secs(kv.ClientTTFT.P95), secs(rr.ClientTTFT.P95),
		msecs(kv.PD.TPOT.P95), msecs(rr.PD.TPOT.P95), local, local+remote)
}

// pdTestPlan is the chat workload of a P/D test on a 2:2 fleet at load
// 0.4 over data plane dp: its defaulted config, its plan keyed as the
// P/D modes key it (x-session-id) and the prefill pool's key block. Bare:
// no metrics, so the prefill table or ring stays as it starts.
func pdTestPlan(t *testing.T, dp DataPlane, d time.Duration, modes ...Mode) (Config, *workloadPlan, string) {
	t.Helper()
	c := Config{Workloads: []string{"chat"}, PD: PD{Prefill: 2, Decode: 2}, DataPlanes: []DataPlane{dp}, Load: 0.4, Duration: d,
		TimeScale: 5, PreStart: 20 * time.Second, Bare: true, Modes: modes}.Defaults()
	p, err := planWorkload(c, "chat")
	if err != nil {
		t.Fatal(err)
	}
	q, key, _, err := pdKey(c, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(q.Requests); n < int(5*d/time.Second) || n > int(27*d/time.Second) {
		t.Fatalf("%d requests over %v; the test wants 5 to 27 a second", n, d)
	}
	return c, q, key
}

// checkPDResult fails the test unless request r succeeded on a decode
// replica that reported its prefill.
func checkPDResult(t *testing.T, r *Request, res reqResult) {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("request %d: %v", r.Seq, res.Err)
	}
	if res.PD == nil {
		t.Fatalf("request %d: no prefill accounting from decode replica %q", r.Seq, res.Replica)
	}
	if !strings.HasPrefix(res.Replica, "decode-") {
		t.Errorf("request %d ran on %q, not a decode replica", r.Seq, res.Replica)
	}
}

// checkPDRemote checks the account of a request prefilled on a prefill
// replica: that replica's prompt is the request's, and the KV of at least
// the last prompt token, at most of the whole prompt, moved.
func checkPDRemote(t *testing.T, r *Request, res reqResult) {
	t.Helper()
	if p := res.PD; !strings.HasPrefix(p.Replica, "prefill-") || p.Prompt != res.PromptTokens ||
		p.Transferred < 1 || p.Transferred > res.PromptTokens {
		t.Errorf("request %d: prefill account %+v, prompt %d", r.Seq, *p, res.PromptTokens)
	}
}

// TestPDGRPC replays a few seconds of chat on a small P/D fleet through
// grpc-go xDS clients that run both steps themselves: a prefill call on
// xds:///bench-prefill, then a decode call on xds:///bench naming where
// the KV is (under index, straight to the replicas the routers pick).
// Every request succeeds and prefills remotely; under kvxds each session
// prefills on one prefill replica (grpc-go's ring on x-session-id); the
// prefill accounting is exactly the prefill replicas' own counters and
// the transferred tokens the decode replicas'.
func TestPDGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, q, key := pdTestPlan(t, GRPCGo, 20*time.Second, KVXDS, Index)
	for _, mode := range c.Modes {
		t.Run(string(mode), func(t *testing.T) {
			run, err := runPD(ctx, c, q, mode, key)
			if err != nil {
				t.Fatal(err)
			}
			prefilledOn := map[string]string{}
			owners := map[string]bool{}
			moved := map[string]bool{}
			var prompt, cached, transferred float64
			for i, res := range run.Results {
				r := &q.Requests[i]
				checkPDResult(t, r, res)
				checkPDRemote(t, r, res)
				if was, ok := prefilledOn[r.Session]; ok && was != res.PD.Replica {
					moved[r.Session] = true
				}
				prefilledOn[r.Session] = res.PD.Replica
				owners[res.PD.Replica] = true
				prompt += float64(res.PD.Prompt)
				cached += float64(res.PD.Cached)
				transferred += float64(res.PD.Transferred)
			}
			if mode == KVXDS && len(moved) > 0 {
				t.Errorf("%d sessions prefilled on more than one replica", len(moved))
			}
			if len(owners) != c.PD.Prefill {
				t.Errorf("prefilled on %v; want every prefill replica", owners)
			}
			// The whole run, warm-up included: the prefill replicas
			// counted what the prefill calls' trailers said, the decode
			// replicas pulled every request's KV and moved what their
			// trailers said.
			var pre EngineCounters
			for _, e := range run.PerReplica[:c.PD.Prefill] {
				pre = pre.Add(e)
			}
			if pre.PrefixQueries != prompt || pre.PrefixHits != cached {
				t.Errorf("prefill replicas counted %v of %v prompt tokens cached; the prefill calls reported %v of %v",
					pre.PrefixHits, pre.PrefixQueries, cached, prompt)
			}
			if a := run.After; a.PDRemote != float64(len(q.Requests)) || a.PDLocalNoHeader+a.PDLocalFailed != 0 || a.PDTransferred != transferred {
				t.Errorf("decode counters %+v; want %d remote prefills, none local, %v tokens transferred", a, len(q.Requests), transferred)
			}

			m := summarizePD(mode, q, run, c.PD)
			p := m.PD
			if m.Failed != 0 || !(p.PrefillHitRate > 0) || !(p.TransferredPerRequest > 0) || p.Remote == 0 {
				t.Errorf("summary: %d failed, %+v", m.Failed, *p)
			}
			// Both calls count at the client; the replicas' TTFT leaves
			// out the harness and the round trip between the calls.
			if !(p.ReplicaTTFT.P50 > 0) || !(m.TTFTOverhead > 0) || !(m.ClientTTFT.P50 > p.ReplicaTTFT.P50) {
				t.Errorf("TTFT p50: client %v, replicas %v; harness %v", m.ClientTTFT.P50, p.ReplicaTTFT.P50, m.TTFTOverhead)
			}
			// The prefill replicas' own part: some of the replicas' whole.
			if !(p.PrefillTTFT.P50 > 0) || !(p.PrefillTTFT.P50 < p.ReplicaTTFT.P50) {
				t.Errorf("TTFT p50: prefill %v, replicas %v", p.PrefillTTFT.P50, p.ReplicaTTFT.P50)
			}
			if mode == KVXDS && (p.PrefillSessionsMoved != 0 || p.PrefillSessions == 0) {
				t.Errorf("prefill keys moved: %d of %d", p.PrefillSessionsMoved, p.PrefillSessions)
			}
			t.Logf("%d requests: prefill hit rate %.3f, %.0f tokens transferred per request, TTFT p95 %s (replicas %s), harness %s",
				len(q.Requests), p.PrefillHitRate, p.TransferredPerRequest, secs(m.ClientTTFT.P95), secs(p.ReplicaTTFT.P95), secs(m.TTFTOverhead))
		})
	}
}

// The goal against round robin names what an ideal router's prefill
// alone reaches, where the stream has one, and whether that is within
// the goal.
func TestPDTargetsIdeal(t *testing.T) {
	mode := func(m Mode, client, replicas float64) ModeResult {
		q := Quantiles{P50: client / 2, P95: client, P99: client}
		r := Quantiles{P50: replicas / 2, P95: replicas, P99: replicas}
		return ModeResult{Mode: m, ClientTTFT: q, PD: &PDResult{ReplicaTTFT: r, PrefillTTFT: r, TPOT: Quantiles{0.01, 0.01, 0.01}}}
	}
	for _, tc := range []struct {
		ideal float64
		want  string
	}{
		{4, "an ideal router's prefill alone 4.00s = 0.40×: reachable"},
		{6, "an ideal router's prefill alone 6.00s = 0.60×: no router reaches 0.5×"},
		{math.NaN(), ""},
	} {
		wr := &WorkloadReport{Name: "trace", PD: PD{6, 2}, Modes: []ModeResult{mode(RoundRobin, 10, 10), mode(KVXDS, 7, 7), mode(UpperBound, math.NaN(), tc.ideal)}}
		var got string
		pdTargets(wr, func(goal, measured string, met bool) {
			if strings.HasSuffix(goal, "≤ 0.5 × round_robin") {
				got = measured
			}
		})
		if tc.want == "" && strings.Contains(got, "ideal") || !strings.Contains(got, tc.want) {
			t.Errorf("ideal %v: %q, want it to name %q", tc.ideal, got, tc.want)
		}
	}
}
