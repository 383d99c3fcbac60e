// Command kvxds-adsload measures how fast kvxds pushes an update to many
// Envoy-like ADS streams, next to a bare go-control-plane server.
//
//	kvxds-adsload bench --kvxds bin/kvxds [--streams 1000,5000] [--delta both] [--repeats 10] [--out DIR]
//	kvxds-adsload soak --kvxds bin/kvxds [--streams 1000] [--duration 10m] [--out DIR]
//	kvxds-adsload run --target HOST:PORT --streams N [--delta] [--conns K] [--nack]
//	kvxds-adsload refserver --xds HOST:PORT --admin HOST:PORT [--endpoints 100]
//	kvxds-adsload serve-kvxds --policy FILE [--cpuprofile FILE] [--memprofile FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/test/adsload"
)

const usage = `kvxds-adsload measures xDS push latency to many Envoy-like ADS streams.

Usage:
  kvxds-adsload bench --kvxds BIN [--streams 1000,5000] [--delta sotw|delta|both] [--repeats 10] [--conns K] [--scrape 1s] [--profile-streams N] [--out DIR]
  kvxds-adsload soak --kvxds BIN [--streams 1000] [--duration 10m] [--delta] [--endpoints 20] [--scrape 250ms] [--out DIR]
  kvxds-adsload run --target HOST:PORT --streams N [--delta] [--conns K] [--nack]
  kvxds-adsload refserver --xds HOST:PORT --admin HOST:PORT [--endpoints 100] [--ads]
  kvxds-adsload serve-kvxds --policy FILE [--cpuprofile FILE] [--memprofile FILE]
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "bench":
		err = bench(ctx, args[1:], stdout, stderr)
	case "soak":
		err = soak(ctx, args[1:], stdout, stderr)
	case "run":
		err = load(ctx, args[1:], stdout, stderr)
	case "refserver":
		err = refserver(ctx, args[1:], stderr)
	case "serve-kvxds":
		err = serveKVXDS(ctx, args[1:], stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "kvxds-adsload: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var usageErr usageError
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return 0
	case errors.As(err, &usageErr):
		return 2
	}
	fmt.Fprintf(stderr, "kvxds-adsload %s: %v\n", args[0], err)
	return 1
}

// usageError is a command line the flag package already reported.
type usageError struct{ error }

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		return usageError{errors.New("unexpected argument")}
	}
	return nil
}

func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kvxds := fs.String("kvxds", "bin/kvxds", "the kvxds binary")
	streams := fs.String("streams", "1000,5000", "stream counts, comma-separated")
	protocols := fs.String("delta", "sotw", "protocols: sotw, delta or both")
	repeats := fs.Int("repeats", 10, "changes of each kind per run")
	conns := fs.Int("conns", 0, "gRPC connections the streams share; 0: one per stream")
	concurrency := fs.Int("concurrency", 64, "streams opened at once")
	scrape := fs.Duration("scrape", time.Second, "kvxds's metrics interval")
	endpoints := fs.Int("endpoints", 100, "endpoints of the pool (simulated engines)")
	profileStreams := fs.Int("profile-streams", 0, "profile kvxds (CPU during the changes, heap after) at this stream count, state of the world")
	out := fs.String("out", "bench-out/adsload", "directory for the table, logs, policies and profiles")
	if err := parse(fs, args); err != nil {
		return err
	}
	var ns []int
	for _, s := range strings.Split(*streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--streams: %q is not a positive number", s)
		}
		ns = append(ns, n)
	}
	var deltas []bool
	switch *protocols {
	case "sotw":
		deltas = []bool{false}
	case "delta":
		deltas = []bool{true}
	case "both":
		deltas = []bool{false, true}
	default:
		return fmt.Errorf("--delta must be sotw, delta or both, not %q", *protocols)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	kbin, err := filepath.Abs(*kvxds)
	if err != nil {
		return fmt.Errorf("--kvxds: %w", err)
	}
	if _, err := os.Stat(kbin); err != nil {
		return fmt.Errorf("--kvxds: %w (go build -o bin/kvxds ./cmd/kvxds)", err)
	}
	rs, err := adsload.Bench(ctx, adsload.BenchConfig{
		KVXDS: kbin, Self: self, Streams: ns, Delta: deltas, Repeats: *repeats,
		Conns: *conns, Concurrency: *concurrency, Endpoints: *endpoints, Scrape: *scrape,
		Dir: *out, ProfileStreams: *profileStreams, Log: stderr,
	})
	table := adsload.Table(rs)
	fmt.Fprintf(stdout, "\nxDS push to Envoy-like ADS streams: kvxds and a bare go-control-plane server, %d CPUs\n\n%s", runtime.NumCPU(), table)
	if werr := os.WriteFile(filepath.Join(*out, "adsload.md"), []byte(table), 0o644); werr != nil && err == nil {
		err = fmt.Errorf("writing the table: %w", werr)
	}
	return err
}

// soak runs kvxds's binary under many streams for a long time while its
// inputs change, prints the report and writes it to DIR/soak.md. It fails
// if a stream missed an update it was owed, a version was re-sent or a
// rejection was not logged exactly once.
func soak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kvxds := fs.String("kvxds", "bin/kvxds", "the kvxds binary")
	streams := fs.Int("streams", 1000, "ADS streams, one node id and connection each")
	nack := fs.Int("nack-streams", 0, "streams rejecting every EDS response; 0: 1% of --streams, negative: none")
	duration := fs.Duration("duration", 10*time.Minute, "how long the changes run")
	delta := fs.Bool("delta", false, "incremental (delta) xDS")
	conns := fs.Int("conns", 0, "gRPC connections the acknowledging streams share; 0: one per stream")
	concurrency := fs.Int("concurrency", 64, "streams opened at once")
	endpoints := fs.Int("endpoints", 20, "endpoints of the pool (simulated engines)")
	scrape := fs.Duration("scrape", 250*time.Millisecond, "kvxds's metrics interval")
	weightEvery := fs.Duration("weight-every", time.Second, "period of the engine-metrics weight changes")
	policyEvery := fs.Duration("policy-every", 30*time.Second, "period of the policy edits")
	sampleEvery := fs.Duration("sample-every", time.Minute, "period of the footprint samples and latency rows")
	out := fs.String("out", "bench-out/soak", "directory for the report, kvxds's log and policy")
	if err := parse(fs, args); err != nil {
		return err
	}
	kbin, err := filepath.Abs(*kvxds)
	if err != nil {
		return fmt.Errorf("--kvxds: %w", err)
	}
	if _, err := os.Stat(kbin); err != nil {
		return fmt.Errorf("--kvxds: %w (make build)", err)
	}
	rep, err := adsload.Soak(ctx, adsload.SoakConfig{
		Server: adsload.BinaryServer(kbin), Streams: *streams, NACKStreams: *nack, Delta: *delta,
		Conns: *conns, Concurrency: *concurrency, Duration: *duration, Endpoints: *endpoints, Scrape: *scrape,
		WeightEvery: *weightEvery, PolicyEvery: *policyEvery, SampleEvery: *sampleEvery, Dir: *out, Log: stderr,
	})
	if rep != nil {
		fmt.Fprintf(stdout, "\n%s\nReport, kvxds's log and policy in %s\n", rep.Markdown(), *out)
	}
	if err != nil {
		return err
	}
	if f := rep.Failures(); len(f) > 0 {
		return fmt.Errorf("soak failed: %s", strings.Join(f, "; "))
	}
	return nil
}

// load opens streams against a server and reports what they receive
// until interrupted.
func load(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "127.0.0.1:18000", "xDS server address")
	streams := fs.Int("streams", 1000, "ADS streams, one node id each")
	delta := fs.Bool("delta", false, "incremental (delta) xDS")
	conns := fs.Int("conns", 0, "gRPC connections the streams share; 0: one per stream")
	concurrency := fs.Int("concurrency", 64, "streams opened at once")
	nack := fs.Bool("nack", false, "reject every EDS response")
	prefix := fs.String("node-prefix", "envoy", "node ids are PREFIX-0, PREFIX-1, …")
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := adsload.RaiseFileLimit(); err != nil {
		return err
	}
	start := time.Now()
	l, err := adsload.Start(ctx, adsload.Options{
		Target: *target, Streams: *streams, Delta: *delta, Conns: *conns,
		Concurrency: *concurrency, NACK: *nack, NodePrefix: *prefix,
	})
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(stdout, "%d streams open and configured in %v\n", *streams, time.Since(start).Round(time.Millisecond))
	m := l.Mark()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := l.Received()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := l.Failed(); err != nil {
			return err
		}
		if n := l.Received(); n != last {
			last = n
			continue
		}
		// Quiet for a second: report what changed since the last report.
		if !l.Moved(m) {
			continue
		}
		e, err := l.Wait(ctx, m, time.Now(), adsload.WaitOptions{Timeout: time.Millisecond})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s version %s: fan-out p50 %v p99 %v last %v, missed %d, other versions %d\n",
			time.Now().Format(time.TimeOnly), e.Version, e.FanoutP50.Round(time.Microsecond),
			e.FanoutP99.Round(time.Microsecond), e.FanoutMax.Round(time.Microsecond), e.Missed, e.Extra)
		m = l.Mark()
	}
}

func refserver(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("refserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	xdsAddr := fs.String("xds", "127.0.0.1:18100", "xDS listen address")
	adminAddr := fs.String("admin", "127.0.0.1:19100", "admin listen address (POST /bump, /metrics, /debug/pprof/)")
	endpoints := fs.Int("endpoints", 100, "endpoints of the ClusterLoadAssignment")
	ads := fs.Bool("ads", false, "the snapshot cache's ADS mode (kvxds runs without it)")
	if err := parse(fs, args); err != nil {
		return err
	}
	xl, err := net.Listen("tcp", *xdsAddr)
	if err != nil {
		return fmt.Errorf("listening for xDS: %w", err)
	}
	al, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		xl.Close()
		return fmt.Errorf("listening for admin: %w", err)
	}
	// SIGUSR1 bumps every weight, as POST /bump does.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	bumps := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				select {
				case bumps <- struct{}{}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return adsload.ServeRef(ctx, adsload.RefOptions{Endpoints: *endpoints, ADS: *ads}, xl, al, bumps)
}

// serveKVXDS runs kvxds's controller as `kvxds serve` does, and profiles
// it: SIGUSR1 starts a CPU profile, SIGUSR2 stops it and writes a heap
// profile.
func serveKVXDS(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve-kvxds", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("policy", "", "policy file (HCL), hot-reloaded")
	cpuFile := fs.String("cpuprofile", "", "CPU profile written between SIGUSR1 and SIGUSR2")
	memFile := fs.String("memprofile", "", "heap profile written at SIGUSR2")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *policyFile == "" {
		return usageError{errors.New("--policy is required")}
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "kvxds", Level: hclog.Warn, Output: stderr})
	c, err := controller.New(controller.Options{PolicyFile: *policyFile, Logger: logger, Version: "adsload"})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sig)
	go func() {
		var cpu *os.File
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sig:
				if s == syscall.SIGUSR1 && *cpuFile != "" && cpu == nil {
					var err error
					if cpu, err = startCPUProfile(*cpuFile); err != nil {
						logger.Error("starting the CPU profile", "error", err)
					}
					continue
				}
				if s == syscall.SIGUSR2 {
					if cpu != nil {
						pprof.StopCPUProfile()
						cpu.Close()
						cpu = nil
					}
					if *memFile != "" {
						if err := writeHeapProfile(*memFile); err != nil {
							logger.Error("writing the heap profile", "error", err)
						}
					}
				}
			}
		}
	}()
	return c.Run(ctx)
}

func startCPUProfile(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
