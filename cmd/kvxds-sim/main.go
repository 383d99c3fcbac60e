// Command kvxds-sim runs simulated vLLM replicas (package test/sim) in one
// process, for benchmarks of kvxds' prefix-aware routing.
//
//	kvxds-sim [--replicas N] [--listen HOST] [--base-port P] [--kv-blocks B]
//	          [--time-scale S] [--block-size 16] [--max-running 256]
//	          [--token-budget 8192] [--prefill-tps 10000]
//	          [--decode-step-base 12ms] [--decode-per-seq 50us] [--model NAME]
//
// It prints one line per replica, "replica-i HOST:PORT", on standard output
// once all are listening, then serves until SIGINT or SIGTERM and logs each
// replica's final counters. Every replica serves the OpenAI API, /metrics
// and gRPC (grpc.testing.TestService) on its one port. With --base-port 0
// each replica takes any free port; otherwise replica i listens on P+i.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/test/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	d := sim.DefaultConfig()
	fs := flag.NewFlagSet("kvxds-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	replicas := fs.Int("replicas", 1, "number of replicas")
	listen := fs.String("listen", "127.0.0.1", "host to listen on")
	basePort := fs.Int("base-port", 0, "port of replica-0; replica i listens on base+i (0: any free port)")
	cfg := d
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", d.KVBlocks, "KV cache capacity per replica, in blocks")
	fs.IntVar(&cfg.BlockSize, "block-size", d.BlockSize, "tokens per KV block")
	fs.IntVar(&cfg.MaxRunning, "max-running", d.MaxRunning, "max running sequences (vLLM --max-num-seqs)")
	fs.IntVar(&cfg.TokenBudget, "token-budget", d.TokenBudget, "max tokens per step (vLLM --max-num-batched-tokens)")
	fs.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tps", d.PrefillTokensPerSec, "uncached prompt tokens per simulated second")
	fs.DurationVar(&cfg.DecodeStepBase, "decode-step-base", d.DecodeStepBase, "fixed simulated cost of one engine step")
	fs.DurationVar(&cfg.DecodePerSeq, "decode-per-seq", d.DecodePerSeq, "extra simulated step cost per decoding sequence")
	fs.Float64Var(&cfg.TimeScale, "time-scale", d.TimeScale, "simulated seconds per wall second")
	fs.StringVar(&cfg.Model, "model", d.Model, "served model name")
	logLevel := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *replicas < 1 || *basePort < 0 || *basePort+*replicas-1 > 65535 {
		fmt.Fprintln(stderr, "kvxds-sim: want --replicas ≥ 1, a valid --base-port, and no arguments")
		fs.Usage()
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "kvxds-sim", Output: stderr, Level: hclog.LevelFromString(*logLevel)})

	fleet := make([]*sim.Replica, 0, *replicas)
	defer func() {
		for _, r := range fleet {
			r.Close()
		}
	}()
	for i := 0; i < *replicas; i++ {
		c := cfg
		c.ID = fmt.Sprintf("replica-%d", i)
		port := 0
		if *basePort > 0 {
			port = *basePort + i
		}
		r, err := sim.Start(c, net.JoinHostPort(*listen, strconv.Itoa(port)))
		if err != nil {
			log.Error("cannot start replica", "replica", c.ID, "error", err)
			return 1
		}
		fleet = append(fleet, r)
	}
	for _, r := range fleet {
		fmt.Fprintf(stdout, "%s %s\n", r.ID(), r.Addr())
	}
	c := fleet[0].Config()
	log.Info("serving", "replicas", len(fleet), "model", c.Model, "kv_blocks", c.KVBlocks, "block_size", c.BlockSize,
		"max_running", c.MaxRunning, "token_budget", c.TokenBudget, "prefill_tps", c.PrefillTokensPerSec,
		"decode_step_base", c.DecodeStepBase, "decode_per_seq", c.DecodePerSeq, "time_scale", c.TimeScale)

	<-ctx.Done()
	log.Info("shutting down")
	for _, r := range fleet {
		s := r.Stats()
		log.Info("replica done", "replica", s.ID, "requests", s.RequestsDone, "aborted", s.RequestsAborted,
			"prefix_queries", s.PrefixQueries, "prefix_hits", s.PrefixHits, "hit_rate", fmt.Sprintf("%.3f", s.HitRate()),
			"preemptions", s.Preemptions, "sim_seconds", fmt.Sprintf("%.1f", s.SimTime), "max_lag", fmt.Sprintf("%.3f", s.MaxLag))
	}
	return 0
}
