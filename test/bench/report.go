package bench

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Write writes results.md, results.csv and the charts into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	for i := range r.Workloads {
		charts, err := WriteCharts(dir, &r.Workloads[i])
		if err != nil {
			return err
		}
		r.Workloads[i].Charts = charts
		if wr := &r.Workloads[i]; wr.Rolling != nil {
			if err := writeFile(filepath.Join(dir, "rolling.csv"), func(w io.Writer) error { return wr.Rolling.csv(w, wr) }); err != nil {
				return err
			}
		}
	}
	var md strings.Builder
	r.Markdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("writing results.md: %w", err)
	}
	return writeFile(filepath.Join(dir, "results.csv"), r.CSV)
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// queueSummary is "mean of the busiest replica / fleet mean / max".
func queueSummary(m ModeResult) (busiest, mean float64, peak int) {
	if len(m.QueueMean) == 0 {
		return math.NaN(), math.NaN(), 0
	}
	sum := 0.0
	for i, q := range m.QueueMean {
		busiest = max(busiest, q)
		sum += q
		peak = max(peak, m.QueueMax[i])
	}
	return busiest, sum / float64(len(m.QueueMean)), peak
}

// Markdown writes one table per workload (modes as rows), the targets and
// the chart paths.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "# kvxds benchmark\n\n")
	fmt.Fprintf(w, "Simulated vLLM replicas (test/sim), kvxds in-process; data plane grpc-go's xDS client unless a "+
		"heading says envoy (Envoy's routing modelled from what kvxds serves over ADS: xds/envoylb tables, bounded "+
		"load, the Lua body-key filter in LuaJIT, HTTP/1.1 to the replicas); seed %d; "+
		"the first %.0f%% of each stream is warm-up and not counted. Times and rates are simulated "+
		"(wall × time scale). Hit rate: the replicas' own vllm:prefix_cache_hits_total / queries_total "+
		"(upper-bound: one cache of the whole fleet's size, offline). Queue depth: requests waiting or "+
		"running in an engine; balance = busiest replica's mean depth / fleet mean depth. CPU: process "+
		"CPU time / wall time during the mode (cores).\n\n",
		r.Config.Seed, 100*r.Config.WarmupFraction)
	if r.Config.Bare {
		fmt.Fprintf(w, "Bare: kvxds, kvxds+prefix, kvxds+conversation and kvxds+bounded hash without the metrics, "+
			"escape and weights blocks (pure consistent hashing).\n\n")
	} else {
		fmt.Fprintf(w, "kvxds, kvxds+prefix, kvxds+conversation and kvxds+bounded carry the metrics, escape and "+
			"weights blocks at their documented defaults (engine vllm; durations divided by the time scale); "+
			"--bare leaves them out.\n\n")
		if len(r.Config.EscapeSet) > 0 {
			fmt.Fprintf(w, "The escape blocks also set: %s.\n\n", strings.Join(r.Config.EscapeSet, "; "))
		}
		if len(r.Config.WeightsSet) > 0 {
			fmt.Fprintf(w, "The weights blocks also set: %s.\n\n", strings.Join(r.Config.WeightsSet, "; "))
		}
	}
	fmt.Fprintf(w, "%s\n\n", hotKeysNote(r.Config.NoHotKeys))
	if note := instancesNote(r.Config.Instances, r.Config.IsolatedInstances); note != "" {
		fmt.Fprintf(w, "%s\n\n", note)
	}
	if len(r.Config.HotValues) > 0 && !r.Config.NoHotKeys {
		fmt.Fprintf(w, "Declared always hot (--hot-values) in every kvxds mode: %s = %s.\n\n", SessionHeader, strings.Join(r.Config.HotValues, ", "))
	}
	for i := range r.Workloads {
		wr := &r.Workloads[i]
		wr.markdownTable(w)
	}
	var targets []Target
	for _, wr := range r.Workloads {
		targets = append(targets, wr.Targets...)
	}
	if len(targets) > 0 {
		fmt.Fprintf(w, "## Targets\n\n| workload | goal | measured | met |\n|---|---|---|---|\n")
		for _, t := range targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Workload, t.Goal, t.Measured, met)
		}
		fmt.Fprintln(w)
	}
	if r.Wall > 0 {
		fmt.Fprintf(w, "Total wall time: %v.\n", r.Wall.Round(time.Second))
	}
}

func (wr *WorkloadReport) markdownTable(w io.Writer) {
	if wr.Rolling != nil {
		wr.Rolling.markdown(w, wr)
		return
	}
	if wr.PD.On() {
		wr.pdMarkdownTable(w)
		return
	}
	if wr.DataPlane == "" || wr.DataPlane == GRPCGo {
		fmt.Fprintf(w, "## %s\n\n", wr.Name)
	} else {
		fmt.Fprintf(w, "## %s, %s data plane\n\n", wr.Name, wr.DataPlane)
	}
	fmt.Fprintf(w, "%d replicas, load %.2f: %.2f req/s (capacity without reuse %.2f req/s per replica); "+
		"%d requests, %d sessions, mean prompt %.0f tokens, mean output %.0f tokens; %v simulated at time scale %g; "+
		"%d KV blocks per replica (%s); first %d requests are warm-up.\n\n",
		wr.Replicas, wr.Load, wr.Rate, wr.Capacity, wr.Requests, wr.Sessions, wr.MeanPrompt, wr.MeanOutput,
		wr.Duration, wr.TimeScale, wr.KVBlocks, wr.KVWhy, wr.Warmup)
	rr, okRR := wr.Mode(RoundRobin)
	fmt.Fprintf(w, "| mode | hit rate | × RR | TTFT p50 / p95 / p99 (client) | TTFT p50 / p95 / p99 (engine) | "+
		"req/s | tok/s | queue: busiest mean / mean / max | balance | failed | sessions moved | escapes / weight moves | CPU cores (machine) | wall |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range wr.Modes {
		vs := "–"
		if okRR && rr.HitRate > 0 {
			vs = num(m.HitRate/rr.HitRate, 2) + "×"
		}
		if !m.Mode.Live() {
			fmt.Fprintf(w, "| %s | %s | %s | – | – | – | – | – | – | – | – | – | – | – |\n", m.Mode, num(m.HitRate, 3), vs)
			continue
		}
		busiest, mean, peak := queueSummary(m)
		fmt.Fprintf(w, "| %s | %s | %s | %s / %s / %s | %s / %s / %s | %s | %s | %s / %s / %d | %s | %d | %d / %d | %d / %d | %s (%s) | %v |\n",
			m.Mode, num(m.HitRate, 3), vs,
			secs(m.ClientTTFT.P50), secs(m.ClientTTFT.P95), secs(m.ClientTTFT.P99),
			secs(m.EngineTTFT.P50), secs(m.EngineTTFT.P95), secs(m.EngineTTFT.P99),
			num(m.ReqPerSec, 1), num(m.TokPerSec, 0),
			num(busiest, 1), num(mean, 1), peak, num(m.Balance, 2),
			m.Failed, m.SessionsMoved, m.MultiSessions, m.Escapes, m.WeightMoves,
			num(m.CPUCores, 2), num(m.MachineCores, 2), m.Wall.Round(100*time.Millisecond))
	}
	fmt.Fprintln(w)
	if len(wr.Modes) > 0 {
		var notes []string
		for _, m := range wr.Modes {
			if m.Mode.Live() {
				notes = append(notes, fmt.Sprintf("%s %s", m.Mode, secs(m.TTFTOverhead)))
			}
		}
		fmt.Fprintf(w, "Client TTFT minus the engine's own TTFT of the same request (mean): %s.\n\n", strings.Join(notes, ", "))
	}
	if wr.Adapters > 0 {
		wr.adaptersTable(w)
	}
	if wr.EscapeNote != "" {
		fmt.Fprintf(w, "kvxds+weights: %s.\n\n", wr.EscapeNote)
	}
	if wr.GroupNote != "" {
		fmt.Fprintf(w, "kvxds+groups: %s.\n\n", wr.GroupNote)
	}
	for _, m := range wr.Modes {
		if m.MachineCores >= cpuSaturated*float64(runtime.NumCPU()) {
			fmt.Fprintf(w, "**Warning:** during %s the machine's CPUs were %.0f%% busy (%.2f of %d cores, this process %.2f): "+
				"the simulator may have fallen behind the wall clock and the timings are distorted; lower --time-scale "+
				"or stop other work.\n\n", m.Mode, 100*m.MachineCores/float64(runtime.NumCPU()), m.MachineCores,
				runtime.NumCPU(), m.CPUCores)
		}
	}
	if len(wr.Charts) > 0 {
		fmt.Fprintf(w, "Charts: %s\n\n", strings.Join(wr.Charts, ", "))
	}
}

// adaptersTable writes each live mode's adapter swap-ins and spread.
func (wr *WorkloadReport) adaptersTable(w io.Writer) {
	fmt.Fprintf(w, "LoRA adapters: %d named by the requests; each replica holds %d (max_lora) and pays a swap-in to load "+
		"another. Swap-ins: sim:lora_swap_ins_total over the measured part; spread: the replicas each adapter's "+
		"measured requests ran on, averaged over those requests; slot waits: requests admitted after the engine passed "+
		"them over for want of a slot (sim:lora_slot_waits_total), per 1,000 measured requests, and their mean wait "+
		"from the first pass-over.\n\n", wr.Adapters, wr.MaxLoRA)
	fmt.Fprintf(w, "| mode | swap-ins | per 1,000 requests | replicas per adapter | slot waits per 1,000 | mean slot wait |\n|---|---|---|---|---|---|\n")
	for _, m := range wr.Modes {
		name := string(m.Mode)
		if !m.Mode.Live() {
			if math.IsNaN(m.SwapIns) {
				continue
			}
			name = fmt.Sprintf("floor (%d slots)", wr.Replicas*wr.MaxLoRA)
		}
		waits, wait := "–", "–"
		if m.Mode.Live() {
			waits = num(m.SlotWaitsPer1k, 1)
			if !math.IsNaN(m.SlotWait) {
				wait = secs(m.SlotWait)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", name, num(m.SwapIns, 0), num(m.SwapInsPer1k, 1), num(m.AdapterSpread, 2), waits, wait)
	}
	fmt.Fprintln(w)
	if ub, ok := wr.Mode(UpperBound); ok && !math.IsNaN(ub.SwapIns) {
		fmt.Fprintf(w, "Floor: the fewest swap-ins any router could have, Belady's MIN over the measured requests' adapters "+
			"in one cache of the fleet's %d slots, from the best loaded start (SwapInFloor): routing, queues and each "+
			"replica's own %d slots only raise it.\n\n", wr.Replicas*wr.MaxLoRA, wr.MaxLoRA)
	}
	if wr.AdapterNote != "" {
		fmt.Fprintf(w, "kvxds+adapters: %s.\n\n", wr.AdapterNote)
	}
}

// cpuSaturated is the fraction of the machine's cores above which a
// mode's timings are flagged as distorted.
const cpuSaturated = 0.85

// csvHeader names the CSV columns.
func csvHeader() []string {
	return append([]string{"workload", "mode", "replicas", "load", "rate_rps", "kv_blocks", "time_scale", "duration_s",
		"requests", "measured", "failed", "hit_rate", "client_hit_rate", "hit_tokens", "query_tokens",
		"ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "engine_ttft_p50_s", "engine_ttft_p95_s", "engine_ttft_p99_s",
		"ttft_overhead_s", "throughput_rps", "throughput_tps", "queue_mean", "queue_busiest_mean", "queue_max",
		"balance", "kv_usage_mean", "sessions_moved", "multi_request_sessions", "preemptions", "escapes",
		"weight_moves", "cpu_cores", "machine_cores", "wall_s", "queue_mean_per_replica", "data_plane",
		"lora_swap_ins", "lora_swap_ins_per_1k", "adapter_spread"}, pdCSVHeader()...)
}

// CSV writes one row per workload and mode.
func (r *Report) CSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	f := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
	for _, wr := range r.Workloads {
		for _, m := range wr.Modes {
			busiest, mean, peak := queueSummary(m)
			per := make([]string, len(m.QueueMean))
			for i, q := range m.QueueMean {
				per[i] = strconv.FormatFloat(q, 'f', 2, 64)
			}
			row := []string{wr.Name, string(m.Mode), strconv.Itoa(wr.Replicas), f(wr.Load), f(wr.Rate),
				strconv.Itoa(wr.KVBlocks), f(wr.TimeScale), f(wr.Duration.Seconds()),
				strconv.Itoa(m.Requests), strconv.Itoa(m.Measured), strconv.Itoa(m.Failed),
				f(m.HitRate), f(m.ClientHitRate), f(m.HitTokens), f(m.QueryToks),
				f(m.ClientTTFT.P50), f(m.ClientTTFT.P95), f(m.ClientTTFT.P99),
				f(m.EngineTTFT.P50), f(m.EngineTTFT.P95), f(m.EngineTTFT.P99),
				f(m.TTFTOverhead), f(m.ReqPerSec), f(m.TokPerSec), f(mean), f(busiest), strconv.Itoa(peak),
				f(m.Balance), f(m.KVMean), strconv.Itoa(m.SessionsMoved), strconv.Itoa(m.MultiSessions),
				f(m.Preemptions), strconv.Itoa(m.Escapes), strconv.Itoa(m.WeightMoves),
				f(m.CPUCores), f(m.MachineCores), f(m.Wall.Seconds()), strings.Join(per, " "), cmp.Or(string(wr.DataPlane), string(GRPCGo)),
				f(m.SwapIns), f(m.SwapInsPer1k), f(m.AdapterSpread)}
			row = append(row, pdCSV(&wr, m, f)...)
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// instancesNote says how many kvxds instances served the live modes,
// "" for one.
func instancesNote(n int, isolated bool) string {
	if n <= 1 {
		return ""
	}
	s := fmt.Sprintf("%d kvxds instances serve each live mode: the first decides, the others follow it (ha { follow }), "+
		"and client i attaches to instance i mod %d; ", n, n)
	if isolated {
		return s + "isolated (--isolated-instances): each instance's tables carry its own clients' requests in flight, " +
			"and the first decides from its own clients' logs alone."
	}
	return s + "the followers report their clients' requests in flight and forward their logged requests to the first, " +
		"so every instance serves the fleet's figures and the first decides from every instance's logs."
}

// hotKeysNote says how the kvxds modes treated hot keys.
func hotKeysNote(off bool) string {
	if off {
		return "Hot keys off (--no-hot-keys): every kvxds mode has hot_keys { enabled = false }, and the grpc-go " +
			"clients send no x-kvxds-spread."
	}
	return "Hot keys at kvxds's defaults in every kvxds mode (interval and half-life divided by the time scale): " +
		"the simulated Envoys send their listener's gRPC access log to kvxds, and the grpc-go clients send each " +
		"request's x-kvxds-spread from its conversation key; --no-hot-keys turns them off."
}
