package bench

import (
	"bytes"
	"context"
	"encoding/csv"
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
				src, err := PDPolicy(PDPolicyOptions{Mode: m, Prefill: []string{"127.0.0.1:1", "127.0.0.1:2"},
					Decode: []string{"127.0.0.1:3"}, Key: key, MinBodyBytes: 100, TimeScale: 5, Scrape: time.Second, Bare: bare})
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
				pf := pol.Pools[0].Prefill
				if kv := m == KVXDS || m == KVXDSHashedDecode; kv != (pf != nil) {
					t.Errorf("%s: prefill block %+v", m, pf)
				} else if kv && (pf.Pool != PrefillPoolName || pf.MinBodyBytes != 100) {
					t.Errorf("%s: prefill block %+v", m, pf)
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
	c := Config{Workloads: []string{"chat"}, PD: PD{Prefill: 2, Decode: 2}, Load: 0.4, Duration: 30 * time.Second,
		TimeScale: 5, PreStart: 20 * time.Second, Bare: true, Modes: []Mode{RoundRobin, KVXDS, UpperBound}}.Defaults()
	p, err := planWorkload(c, "chat")
	if err != nil {
		t.Fatal(err)
	}
	q, key, _, err := pdKey(c, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Requests) < 150 || len(q.Requests) > 800 {
		t.Fatalf("%d requests; the test wants a few hundred", len(q.Requests))
	}
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
		if res.Err != nil {
			t.Fatalf("request %d: %v", r.Seq, res.Err)
		}
		if res.PD == nil {
			t.Fatalf("request %d: no prefill accounting from decode replica %q", r.Seq, res.Replica)
		}
		if !strings.HasPrefix(res.Replica, "decode-") {
			t.Errorf("request %d ran on %q, not a decode replica", r.Seq, res.Replica)
		}
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
			if !strings.HasPrefix(res.PD.Replica, "prefill-") || res.PD.Prompt != res.PromptTokens {
				t.Errorf("request %d: prefill account %+v, prompt %d", r.Seq, *res.PD, res.PromptTokens)
			}
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
	wr := &WorkloadReport{Name: "chat", DataPlane: Envoy, Replicas: c.Replicas, PD: c.PD, PDKey: SessionHeader,
		Modes: []ModeResult{rr, kv, PrefillUpperBound(q.Requests, q.Warmup, c.PD.Prefill*q.KVBlocks, 16)}}
	wr.Targets = Targets(wr)
	var md bytes.Buffer
	(&Report{Config: c, Workloads: []WorkloadReport{*wr}}).Markdown(&md)
	for _, want := range []string{"## chat, envoy data plane, prefill/decode 2:2", "| mode | prefill hit rate | × RR |",
		"TTFT p95 (replicas)", "TPOT p50 / p95", "balance: prefill / decode", "prefills: remote / local (no header, failed)",
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
	if len(rows) != 4 || col < 0 || rows[2][col] == "" || !slices.Contains(rows[0], "tpot_p95_s") || !slices.Contains(rows[0], "replica_ttft_p95_s") {
		t.Errorf("results.csv: %v", rows)
	}
	t.Logf("prefill hit rate %.3f (round robin %.3f), TTFT p95 %s (%s), TPOT p95 %s (%s), %d local of %d",
		kv.PD.PrefillHitRate, rr.PD.PrefillHitRate, secs(kv.ClientTTFT.P95), secs(rr.ClientTTFT.P95),
		msecs(kv.PD.TPOT.P95), msecs(rr.PD.TPOT.P95), local, local+remote)
}
