// Command kvxds-bench measures what kvxds's routing does for prefix-cache
// locality: it replays deterministic LLM workloads through grpc-go xDS
// clients routed by an in-process kvxds onto simulated vLLM replicas, once
// per routing mode on a fresh fleet, and reports hit rates (from the
// engines' own counters), TTFT, throughput and balance as Markdown, CSV
// and PNG charts.
//
//	kvxds-bench --workload chat --modes round_robin,kvxds --replicas 4
//	kvxds-bench --workload all            # every workload, every mode
//	kvxds-bench --workload rolling        # rolling restarts (root, iproute2, make kube-deps)
//	kvxds-bench --trace conversation_trace.jsonl --modes round_robin,kvxds,upper-bound  # a Mooncake trace
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/test/bench"
	"github.com/kvxds/kvxds/test/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kvxds-bench:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvxds-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		wl = fs.String("workload", "chat", "comma-separated workloads ("+strings.Join(bench.WorkloadNames(), ", ")+") or \"all\" "+
			"(rolling only where it can run: as root, with iproute2 and make kube-deps)")
		replicas   = fs.Int("replicas", 8, "simulated replicas in the fleet")
		load       = fs.Float64("load", 0.7, "offered load as a fraction of the fleet's capacity without prefix reuse")
		duration   = fs.Duration("duration", 0, "simulated length of each request stream (0: wall-per-mode × time scale)")
		wall       = fs.Duration("wall-per-mode", 16*time.Second, "target wall time of one mode when --duration is 0")
		seed       = fs.Uint64("seed", 1, "workload seed")
		modes      = fs.String("modes", "all", "comma-separated modes: round_robin, least_request, kvxds, kvxds+weights, upper-bound, or all; and, run only when named, kvxds+groups (the busiest session key in a tenant group) and kvxds+bounded (kvxds with --balance-factor; envoy data plane only) and kvxds+prefix (kvxds keyed on the body's prompt_prefix of --prompt-prefix bytes; of a trace, of each of --prefix-blocks) and kvxds+conversation (kvxds keyed on the body's leading messages, key { conversation = true }) and index (an approximate prefix-index router after SGLang's cache_aware policy, dialling the replicas directly) and index-llmd (a prefix-index router after llm-d's default profile: prefix-cache, queue and KV-utilisation scorers, max-score picker) and kvxds+adapters (kvxds with an adapters block: each LoRA adapter on replicas of its own, within --max-lora slots) and index-llmd+lora (index-llmd plus llm-d's lora-affinity scorer on the replicas' vllm:lora_requests_info) and, with --pd, kvxds+hashed-decode (the decode pool hashed on the prefill key too)")
		groupReps  = fs.Int("group-replicas", 2, "kvxds+groups: replicas of the busiest session key's group")
		groupLvls  = fs.Int("group-weight-levels", 3, "kvxds+groups: weight levels N (weights MIN to MIN+N-1, at most one move per replica every 10 simulated seconds); 1 keeps kvxds+weights' weights")
		groupMin   = fs.Int("group-weight-min", 2, "kvxds+groups: the lowest weight (MIN)")
		groupExcl  = fs.Bool("group-exclusive", true, "kvxds+groups: the group is exclusive (its replicas leave the pool's own table); false: they serve both")
		groupRel   = fs.Bool("group-relative", true, "kvxds+groups: weights follow each replica's load against the mean of the replicas sharing its hash table (weights { relative = true }); false: its own headroom")
		scale      = fs.Float64("time-scale", 0, "simulated seconds per wall second (0: chosen per workload to keep the streamed-token rate within the CPU budget)")
		kvBlocks   = fs.Int("kv-blocks", 0, "KV blocks per replica (0: the workload's default)")
		out        = fs.String("out", "bench-out", "output directory for results.md, results.csv, the charts and kvxds.log")
		quick      = fs.Bool("quick", false, "short runs (6 s of wall time per mode) for a smoke test")
		warmup     = fs.Float64("warmup", 0.2, "fraction of each stream's first requests left out of the statistics")
		clients    = fs.Int("clients", 2, "grpc-go xDS clients, or simulated Envoys on the envoy data plane, sharing the requests (each its own xDS node, connections and requests in flight)")
		inTurn     = fs.Bool("clients-in-turn", false, "send request k through client k mod --clients, whatever its session (by default a session keeps one client)")
		instances  = fs.Int("instances", 1, "kvxds instances serving each live mode: the first decides, the others follow it (ha { follow }); client i attaches to instance i mod N")
		isolated   = fs.Bool("isolated-instances", false, "with --instances: each instance keeps its Envoys' requests in flight to itself (no load reports between instances), the ablation")
		bare       = fs.Bool("bare", false, "kvxds, kvxds+prefix, kvxds+conversation and kvxds+bounded without the metrics, escape and weights blocks: pure consistent hashing (default: those blocks at their documented defaults)")
		escapeSet  = fs.String("escape-set", "", "semicolon-separated attributes written into every kvxds mode's deployed escape block, as in \"max_kv_occupancy = 1\": the ablation of a threshold (default: the documented defaults)")
		weightsSet = fs.String("weights-set", "", "semicolon-separated attributes written into every kvxds mode's deployed weights block, as in \"max = 1\" (default: the documented defaults)")
		hotValues  = fs.String("hot-values", "", "comma-separated values of the session header every kvxds mode declares always hot (hash { hot_keys { declared { header = \"x-session-id\" values = [...] } } }), as an operator of a pool without access logs does; not with a body key")
		noHotKeys  = fs.Bool("no-hot-keys", false, "every kvxds mode with hot keys off (hash { hot_keys { enabled = false } }), and the grpc-go clients send no x-kvxds-spread: the ablation (default: hot keys at kvxds's defaults, interval and half-life divided by the time scale; grpc-go clients send each request's spread sub-key from its conversation key)")
		echo       = fs.Bool("echo-replies", true, "next turns re-send the engine's own reply (see test/bench.PrepareRequests)")
		budget     = fs.Float64("message-budget", 40000, "streamed tokens per wall second the automatic time scale aims at")
		logLevel   = fs.String("log-level", "info", "level of kvxds's log in OUT/kvxds.log")
		noProgress = fs.Bool("no-progress", false, "do not print the progress line")
		variants   = fs.String("rolling-variants", "statefulset,deployment", "the rolling workload's rollouts: statefulset, deployment")
		admin      = fs.String("admin", "127.0.0.1:0", "admin address (status page, /metrics) of the kvxds each live mode runs, reused mode after mode")
		trace      = fs.String("trace", "", "replay this JSONL trace (Mooncake's FAST'25 format) instead of --workload, with the prompt_prefix key")
		prefix     = fs.String("prefix-blocks", "1,4", "with --trace: the prompt_prefix lengths kvxds runs with, in 512-token trace blocks")
		dataPlane  = fs.String("data-plane", "grpc-go", "comma-separated data planes, each running every workload and mode: grpc-go (its xDS client), envoy (Envoy's routing from what kvxds serves over ADS: its tables, bounded load, the Lua body-key filter in LuaJIT; needs luajit)")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the whole run (load generator, data plane, simulator, kvxds) to this file")
		promptPfx  = fs.Int("prompt-prefix", 512, "kvxds+prefix: the prompt_prefix key's length in bytes of the chat body's messages")
		maxLoRA    = fs.Int("max-lora", 4, "LoRA adapter slots of every simulated replica (vLLM --max-loras, reported in vllm:lora_requests_info) and kvxds+adapters' max_lora")
		adapterLd  = fs.Duration("adapter-load", 0, "engine time of one LoRA adapter swap-in (0: the simulator's default)")
		pdFleet    = fs.String("pd", "", "P:D: run every workload on a prefill/decode fleet of P prefill and D decode replicas (in place of --replicas; the load is a fraction of P+D colocated replicas' capacity), under round_robin, least_request, kvxds, index and upper-bound (and kvxds+hashed-decode when named); on the envoy data plane unless --data-plane is given (envoy needs luajit); on grpc-go each client prefills on xds:///bench-prefill and decodes on xds:///bench itself")
		pdKey      = fs.String("pd-key", "", "with --pd: the prefill pool's key: session (x-session-id), conversation, prompt_prefix (--prompt-prefix bytes; of a trace, the first --prefix-blocks); default session where the requests carry one, prompt_prefix for a trace, else conversation")
		loadIv     = fs.Duration("load-interval", 0, "with --balance-on prompt_bytes, the colocated hash modes' load_interval (simulated): how often Envoy's pick filters learn every replica's bytes in flight; 0 keeps the default (1s), a negative value turns it off")
		balanceOn  = fs.String("balance-on", "", "the hash modes' balance_on (with --pd, the prefill pool's): what their bound counts, requests (Envoy's own bound) or prompt_bytes (Envoy's Lua filter picks from the pool's slot table, bounded on prompt bytes in flight); empty keeps the policy's default")
		pdBalance  = fs.Int("pd-balance-factor", 0, "with --pd: the kvxds modes' prefill pool balance_factor, bounding each Envoy's requests in flight per prefill replica (0: the policy's default, 250 for prompt_prefix and conversation keys, 1000 on prompt bytes for a header)")
		pdMinBody  = fs.Int("pd-min-body", 0, "with --pd: the kvxds modes' prefill { min_body_bytes }: shorter request bodies prefill on their decode replica (0: every request on a prefill replica)")
		balance    = fs.Int("balance-factor", 0, "the hash modes' balance_factor (Envoy's hash_balance_factor, percent): 0 leaves a body key the policy's default (250 for prompt_prefix and conversation keys) and gives kvxds+bounded 150")
		workloads  []string
		prefixes   []int
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *wl == "all" {
		workloads = workload.Names()
		if err := bench.RollingUsable(); err != nil {
			fmt.Fprintf(stderr, "kvxds-bench: skipping %s: %v\n", bench.RollingName, err)
		} else {
			workloads = append(workloads, bench.RollingName)
		}
	} else {
		for _, w := range strings.Split(*wl, ",") {
			workloads = append(workloads, strings.TrimSpace(w))
		}
	}
	if *trace != "" {
		for _, f := range strings.Split(*prefix, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("--prefix-blocks: %q is not a positive number of blocks", f)
			}
			prefixes = append(prefixes, n)
		}
		if *modes == "all" {
			*modes = "round_robin,kvxds,upper-bound"
		}
	}
	var pd bench.PD
	if *pdFleet != "" {
		var err error
		if pd, err = bench.ParsePD(*pdFleet); err != nil {
			return fmt.Errorf("--pd: %w", err)
		}
		if *modes == "all" {
			*modes = "round_robin,least_request,kvxds,index,upper-bound"
		}
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "data-plane" })
		if !explicit {
			*dataPlane = string(bench.Envoy)
		}
	}
	ms, err := bench.ParseModes(*modes)
	if err != nil {
		return err
	}
	dps, err := bench.ParseDataPlanes(*dataPlane)
	if err != nil {
		return fmt.Errorf("--data-plane: %w", err)
	}
	if slices.Contains(dps, bench.Envoy) {
		_, err := bench.LuaJIT()
		switch {
		case err != nil && pd.On():
			// Every kvxds mode runs the decode listener's Lua filters.
			return fmt.Errorf("--pd: %w", err)
		case err != nil && *trace != "":
			return err
		}
	}
	switch {
	case *replicas < 1:
		return fmt.Errorf("--replicas must be at least 1, not %d", *replicas)
	case !(*load > 0) || *load > 2:
		return fmt.Errorf("--load must be above 0 and at most 2 (a fraction of the fleet's capacity without reuse), not %g", *load)
	case *scale < 0:
		return fmt.Errorf("--time-scale must not be negative (0 picks one per workload), not %g", *scale)
	case *kvBlocks < 0:
		return fmt.Errorf("--kv-blocks must not be negative (0 keeps the workload's default), not %d", *kvBlocks)
	}
	var rolling bench.Rolling
	for _, v := range strings.Split(*variants, ",") {
		rolling.Variants = append(rolling.Variants, bench.RollVariant(strings.TrimSpace(v)))
	}
	if *quick {
		*wall = 6 * time.Second
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(*out, "kvxds.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cfg := bench.Config{
		Workloads:         workloads,
		Replicas:          *replicas,
		GroupReplicas:     *groupReps,
		GroupWeightLevels: *groupLvls,
		GroupWeightMin:    *groupMin,
		GroupHeadroom:     !*groupRel,
		GroupShared:       !*groupExcl,
		Load:              *load,
		Duration:          *duration,
		WallPerMode:       *wall,
		Seed:              *seed,
		Modes:             ms,
		TimeScale:         *scale,
		MessageBudget:     *budget,
		KVBlocks:          *kvBlocks,
		WarmupFraction:    *warmup,
		Clients:           *clients,
		ClientsInTurn:     *inTurn,
		Instances:         *instances,
		IsolatedInstances: *isolated,
		Bare:              *bare,
		NoHotKeys:         *noHotKeys,
		HotValues:         splitNonEmpty(*hotValues, ","),
		EscapeSet:         splitNonEmpty(*escapeSet, ";"),
		WeightsSet:        splitNonEmpty(*weightsSet, ";"),
		EchoReplies:       *echo,
		Rolling:           rolling,
		AdminAddress:      *admin,
		Trace:             *trace,
		DataPlanes:        dps,
		BalanceFactor:     *balance,
		MaxLoRA:           *maxLoRA,
		AdapterLoad:       *adapterLd,
		PrefixBlocks:      prefixes,
		PromptPrefix:      *promptPfx,
		PD:                pd,
		PDKey:             *pdKey,
		PDMinBodyBytes:    *pdMinBody,
		PDBalanceFactor:   *pdBalance,
		BalanceOn:         *balanceOn,
		LoadInterval:      *loadIv,
		Out:               *out,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "kvxds", Level: hclog.LevelFromString(*logLevel),
			Output: logFile, TimeFormat: "15:04:05.000"}),
	}
	if !*noProgress {
		cfg.Progress = stderr
		cfg.ProgressLive = isTerminal(stderr)
	}
	if *warmup == 0 {
		cfg.WarmupFraction = -1 // none; Config treats 0 as unset
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Workloads) > 0 {
		rep.Markdown(stdout)
		fmt.Fprintf(stdout, "\nResults in %s (results.md, results.csv, charts, kvxds.log); %v wall.\n",
			*out, time.Since(start).Round(time.Second))
	}
	return err
}

// isTerminal reports whether w is a terminal, where a progress line may
// be rewritten in place; in a log it would run a whole mode into one line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// splitNonEmpty splits s at sep, dropping empty parts.
func splitNonEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
