package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kvxds/kvxds/test/sim"
)

// pdMarkdownTable writes a P/D workload's table: the prefill side's hit
// rate, the client's TTFT and TPOT, each role's balance, where requests
// prefilled and how much KV moved.
func (wr *WorkloadReport) pdMarkdownTable(w io.Writer) {
	fmt.Fprintf(w, "## %s, %s data plane, prefill/decode %s\n\n", wr.Name, wr.DataPlane, wr.PD)
	fmt.Fprintf(w, "%d prefill and %d decode replicas (KV transfer %v a token), load %.2f of %d colocated replicas' "+
		"capacity: %.2f req/s (capacity without reuse %.2f req/s per replica); %d requests, %d distinct prefill keys (%s), "+
		"mean prompt %.0f tokens, mean output %.0f tokens; %v simulated at time scale %g; %d KV blocks per replica (%s); "+
		"first %d requests are warm-up.\n\n",
		wr.PD.Prefill, wr.PD.Decode, sim.DefaultConfig().TransferPerToken, wr.Load, wr.Replicas, wr.Rate, wr.Capacity,
		wr.Requests, wr.Sessions, wr.PDKey, wr.MeanPrompt, wr.MeanOutput, wr.Duration.Round(time.Second), wr.TimeScale, wr.KVBlocks, wr.KVWhy, wr.Warmup)
	rr, okRR := wr.Mode(RoundRobin)
	fmt.Fprintf(w, "| mode | prefill hit rate | × RR | TTFT p50 / p95 / p99 (client) | TTFT p95 (replicas: all / prefill) | TPOT p50 / p95 | req/s | "+
		"balance: prefill / decode | prefills: remote / local (no header, failed) | KV transferred per request (tokens) | "+
		"prefill keys moved | failed | harness | CPU cores (machine) | wall |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range wr.Modes {
		if m.PD == nil {
			continue
		}
		vs := "–"
		if okRR && rr.PD != nil && rr.PD.PrefillHitRate > 0 {
			vs = num(m.PD.PrefillHitRate/rr.PD.PrefillHitRate, 2) + "×"
		}
		if !m.Mode.Live() {
			fmt.Fprintf(w, "| %s | %s | %s | – | – / %s | – | – | – | – | – | – | – | – | – | – |\n", m.Mode, num(m.PD.PrefillHitRate, 3), vs, secs(m.PD.PrefillTTFT.P95))
			continue
		}
		p := m.PD
		fmt.Fprintf(w, "| %s | %s | %s | %s / %s / %s | %s / %s | %s / %s | %s | %s / %s | %s / %s (%s, %s) | %s | %d / %d | %d | %s | %s (%s) | %v |\n",
			m.Mode, num(p.PrefillHitRate, 3), vs,
			secs(m.ClientTTFT.P50), secs(m.ClientTTFT.P95), secs(m.ClientTTFT.P99), secs(p.ReplicaTTFT.P95), secs(p.PrefillTTFT.P95),
			msecs(p.TPOT.P50), msecs(p.TPOT.P95), num(m.ReqPerSec, 1),
			num(p.PrefillBalance, 2), num(p.DecodeBalance, 2),
			num(p.Remote, 0), num(p.LocalNoHeader+p.LocalFailed, 0), num(p.LocalNoHeader, 0), num(p.LocalFailed, 0),
			num(p.TransferredPerRequest, 0), p.PrefillSessionsMoved, p.PrefillSessions, m.Failed, secs(m.TTFTOverhead),
			num(m.CPUCores, 2), num(m.MachineCores, 2), m.Wall.Round(100*time.Millisecond))
	}
	fmt.Fprintln(w)
	// Where each figure comes from: the decode replica's response on
	// Envoy, the client's two calls on grpc-go.
	from, ttft, harness := "as its decode replica reports it (X-Prefill-Cached-Tokens, X-Prefill-Prompt-Tokens; "+
		"a request prefilled on its decode replica counts that replica's)",
		"all: the TTFT each decode replica reports (X-Ttft-Seconds: the prefill replica's own, the transfer, the decode engine's wait and step); "+
			"prefill: the prefill replica's own (its queue and prefill, X-Prefill-Ttft-Seconds), over the requests prefilled remotely",
		"the load generator, the simulated Envoy and its Lua filters, and the HTTP calls"
	if wr.DataPlane == GRPCGo {
		from, ttft, harness = "as the prefill call's trailer reports it (x-cached-tokens, x-prompt-tokens)",
			"all: the prefill call's x-ttft-seconds (the prefill replica's queue and prefill) plus the decode call's "+
				"(the KV pull, the decode engine's wait and step); prefill: the prefill call's alone",
			"the load generator and grpc-go, and between the two calls the prefill call's end and the decode call's round trip"
	}
	fmt.Fprintf(w, "Prefill hit rate: Σ cached / Σ prompt tokens of each measured request's prefill, %s; "+
		"upper-bound: the prompts through one cache of all %d prefill replicas' blocks, prompts only (a prefill replica never "+
		"computes the reply), and its prefill TTFT an ideal router's on an open-loop stream (IdealPrefillTTFT: each "+
		"prompt computing only what that cache misses, on the replica that frees first; the transfer and the decode step left out). "+
		"TTFT (replicas): %s. TPOT: (last − first token) / (tokens − 1) per request at the client. Balance: the busiest "+
		"replica's mean queue depth over the role's mean. Prefills: the decode replicas' sim:pd_remote_prefills_total and "+
		"sim:pd_local_prefills_total by reason. Prefill keys moved: keys (%s) whose remote prefills ran on more than one "+
		"prefill replica, of those with at least two. Harness: the mean of client TTFT minus the replicas' TTFT: %s.\n\n",
		from, wr.PD.Prefill, ttft, wr.PDKey, harness)
	if len(wr.Charts) > 0 {
		fmt.Fprintf(w, "Charts: %s\n\n", strings.Join(wr.Charts, ", "))
	}
}

// pdCSVHeader names the P/D columns of results.csv, empty for a colocated
// fleet.
func pdCSVHeader() []string {
	return []string{"pd", "pd_key", "prefill_hit_rate", "replica_ttft_p50_s", "replica_ttft_p95_s", "replica_ttft_p99_s",
		"prefill_ttft_p50_s", "prefill_ttft_p95_s", "prefill_ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s", "prefill_balance", "decode_balance",
		"remote_prefills", "local_prefills_no_header", "local_prefills_failed", "transferred_tokens", "transferred_per_request",
		"prefill_keys_moved", "prefill_keys"}
}

// pdCSV is m's P/D columns.
func pdCSV(wr *WorkloadReport, m ModeResult, f func(float64) string) []string {
	p := m.PD
	if p == nil {
		return make([]string, len(pdCSVHeader()))
	}
	return []string{wr.PD.String(), wr.PDKey, f(p.PrefillHitRate), f(p.ReplicaTTFT.P50), f(p.ReplicaTTFT.P95), f(p.ReplicaTTFT.P99),
		f(p.PrefillTTFT.P50), f(p.PrefillTTFT.P95), f(p.PrefillTTFT.P99), f(p.TPOT.P50), f(p.TPOT.P95), f(p.TPOT.P99),
		f(p.PrefillBalance), f(p.DecodeBalance), f(p.Remote), f(p.LocalNoHeader), f(p.LocalFailed), f(p.Transferred),
		f(p.TransferredPerRequest), strconv.Itoa(p.PrefillSessionsMoved), strconv.Itoa(p.PrefillSessions)}
}
