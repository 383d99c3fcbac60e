package adsload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// BenchConfig configures Bench.
type BenchConfig struct {
	// KVXDS is the kvxds binary, run as `kvxds serve --policy FILE`.
	KVXDS string
	// Self is an executable with the subcommands "refserver" and
	// "serve-kvxds" (cmd/kvxds-adsload).
	Self string
	// Streams are the stream counts to measure.
	Streams []int
	// Delta lists the protocols: false for state of the world, true for
	// delta.
	Delta []bool
	// Repeats is the number of changes of each kind per run.
	Repeats int
	// Conns, Concurrency: see Options.
	Conns, Concurrency int
	// Endpoints is the pool size; Scrape the metrics interval.
	Endpoints int
	Scrape    time.Duration
	// Dir holds policies, logs and profiles.
	Dir string
	// ProfileStreams, if positive, runs kvxds at that stream count (state
	// of the world) as `Self serve-kvxds`, which writes a CPU profile of
	// the changes and a heap profile after them into Dir.
	ProfileStreams int
	// Log receives progress.
	Log io.Writer
}

// Result is the medians of one server, protocol, stream count and kind
// of change.
type Result struct {
	Server  string // "kvxds" or "go-control-plane"
	Delta   bool
	Streams int
	Change  string // "policy file", "engine metrics", "snapshot"
	Events  []Event
	// Memory per stream: (with the streams − idle) / streams.
	RSSPerStream, HeapPerStream float64
	// FanoutRatio is kvxds's fan-out p99 ÷ go-control-plane's (kvxds rows).
	FanoutRatio float64
	// Profiled says kvxds ran with the CPU profiler on.
	Profiled bool
}

// Median returns the median of f over the events.
func (r Result) Median(f func(Event) time.Duration) time.Duration {
	if len(r.Events) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(r.Events))
	for i, e := range r.Events {
		ds[i] = f(e)
	}
	slices.Sort(ds)
	if n := len(ds); n%2 == 0 {
		return (ds[n/2-1] + ds[n/2]) / 2
	}
	return ds[len(ds)/2]
}

// Missed sums the missed updates over the events.
func (r Result) Missed() int {
	n := 0
	for _, e := range r.Events {
		n += e.Missed
	}
	return n
}

// Extra sums the intermediate versions over the events.
func (r Result) Extra() int {
	n := 0
	for _, e := range r.Events {
		n += e.Extra
	}
	return n
}

// Bench measures both servers at every stream count and protocol.
func Bench(ctx context.Context, c BenchConfig) ([]Result, error) {
	if c.Repeats <= 0 {
		c.Repeats = 10
	}
	if c.Endpoints <= 0 {
		c.Endpoints = 100
	}
	if c.Scrape <= 0 {
		c.Scrape = time.Second
	}
	if len(c.Delta) == 0 {
		c.Delta = []bool{false}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", c.Dir, err)
	}
	limit, err := RaiseFileLimit()
	if err != nil {
		return nil, err
	}
	engines, err := StartEngines(c.Endpoints)
	if err != nil {
		return nil, err
	}
	defer engines.Close()

	var out []Result
	for _, delta := range c.Delta {
		for _, n := range c.Streams {
			// Each stream holds a descriptor here (one connection each),
			// plus the engines' listeners and kvxds's scrapes.
			need := uint64(n) + uint64(2*c.Endpoints) + 256
			if c.Conns > 0 {
				need = uint64(c.Conns) + uint64(2*c.Endpoints) + 256
			}
			if need > limit {
				fmt.Fprintf(c.Log, "skipping %d streams: needs about %d file descriptors, the limit is %d\n", n, need, limit)
				continue
			}
			ref, err := c.runRef(ctx, n, delta)
			if err != nil {
				return out, err
			}
			out = append(out, ref)
			ks, err := c.runKVXDS(ctx, n, delta, engines)
			if err != nil {
				return out, err
			}
			p99 := ref.Median(func(e Event) time.Duration { return e.FanoutP99 })
			for i := range ks {
				ks[i].FanoutRatio = float64(ks[i].Median(func(e Event) time.Duration { return e.FanoutP99 })) / float64(p99)
			}
			out = append(out, ks...)
		}
	}
	return out, nil
}

func (c BenchConfig) options(target string, n int, delta bool) Options {
	return Options{Target: target, Streams: n, Delta: delta, Conns: c.Conns, Concurrency: c.Concurrency}
}

func protocol(delta bool) string {
	if delta {
		return "delta"
	}
	return "sotw"
}

// logFile opens a server's log in Dir.
func (c BenchConfig) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("creating log: %w", err)
	}
	return f, nil
}

// runRef measures the reference server.
func (c BenchConfig) runRef(ctx context.Context, n int, delta bool) (Result, error) {
	res := Result{Server: "go-control-plane", Delta: delta, Streams: n, Change: "snapshot"}
	xdsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	log, err := c.logFile(fmt.Sprintf("refserver-%s-%d", protocol(delta), n))
	if err != nil {
		return res, err
	}
	defer log.Close()
	p, err := startProcess("reference server", adminAddr, log, c.Self, "refserver",
		"--xds", xdsAddr, "--admin", adminAddr, "--endpoints", fmt.Sprint(c.Endpoints))
	if err != nil {
		return res, err
	}
	defer p.stop()
	if err := p.awaitReady(ctx, 30*time.Second); err != nil {
		return res, err
	}
	fmt.Fprintf(c.Log, "go-control-plane, %s, %d streams\n", protocol(delta), n)
	err = c.measure(ctx, &res, p, xdsAddr, n, delta, func(l *Load) error {
		for range c.Repeats {
			m := l.Mark()
			set, err := bump(ctx, adminAddr)
			if err != nil {
				return err
			}
			e, err := l.Wait(ctx, m, set, WaitOptions{})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Log, "  snapshot: %v\n", e)
			res.Events = append(res.Events, e)
		}
		return nil
	})
	return res, err
}

// bump asks the reference server for a new snapshot and returns the time
// it set it.
func bump(ctx context.Context, admin string) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+admin+BumpPath, nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, fmt.Errorf("bumping the reference server: %w", err)
	}
	defer resp.Body.Close()
	var r bumpResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return time.Time{}, fmt.Errorf("bumping the reference server: %s: %w", resp.Status, err)
	}
	return time.Unix(0, r.SetUnixNano), nil
}

// measure takes the idle memory of p, opens n streams, takes the memory
// again and runs the changes.
func (c BenchConfig) measure(ctx context.Context, res *Result, p *process, target string, n int, delta bool, changes func(*Load) error) error {
	idle, err := p.memory(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	l, err := Start(ctx, c.options(target, n, delta))
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(c.Log, "  %d streams open and configured in %v\n", n, time.Since(start).Round(time.Millisecond))
	// Let the server finish acknowledging before reading its memory.
	time.Sleep(2 * time.Second)
	loaded, err := p.memory(ctx)
	if err != nil {
		return err
	}
	res.RSSPerStream = (loaded.RSS - idle.RSS) / float64(n)
	res.HeapPerStream = (loaded.HeapInuse - idle.HeapInuse) / float64(n)
	fmt.Fprintf(c.Log, "  RSS %.1f → %.1f MiB, heap in use %.1f → %.1f MiB\n",
		idle.RSS/(1<<20), loaded.RSS/(1<<20), idle.HeapInuse/(1<<20), loaded.HeapInuse/(1<<20))
	return changes(l)
}

// runKVXDS measures kvxds: policy rewrites, then engine queue changes.
func (c BenchConfig) runKVXDS(ctx context.Context, n int, delta bool, engines *Engines) ([]Result, error) {
	policyRes := Result{Server: "kvxds", Delta: delta, Streams: n, Change: "policy file"}
	metricsRes := Result{Server: "kvxds", Delta: delta, Streams: n, Change: "engine metrics"}
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("kvxds-%s-%d", protocol(delta), n)
	path := filepath.Join(c.Dir, name+".hcl")
	po := PolicyOptions{XDS: xdsAddr, Admin: adminAddr, Endpoints: engines.Addrs(), Weight: 1, Scrape: c.Scrape}
	if err := WritePolicy(path, po); err != nil {
		return nil, err
	}
	log, err := c.logFile(name)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	profile := c.ProfileStreams == n && !delta
	bin, args := c.KVXDS, []string{"serve", "--policy", path, "--log-level", "warn"}
	if profile {
		bin, args = c.Self, []string{"serve-kvxds", "--policy", path,
			"--cpuprofile", filepath.Join(c.Dir, fmt.Sprintf("kvxds-cpu-%d.pprof", n)),
			"--memprofile", filepath.Join(c.Dir, fmt.Sprintf("kvxds-heap-%d.pprof", n))}
	}
	p, err := startProcess("kvxds", adminAddr, log, bin, args...)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := p.awaitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	// Every engine scraped at least twice, so weights have settled.
	if err := awaitMetric(ctx, p, "kvxds_scrapes_total", float64(2*len(engines.Addrs())), 30*time.Second); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "kvxds, %s, %d streams%s\n", protocol(delta), n, map[bool]string{true: " (profiled)"}[profile])
	err = c.measure(ctx, &policyRes, p, xdsAddr, n, delta, func(l *Load) error {
		if profile {
			if err := p.signal(syscall.SIGUSR1); err != nil {
				return err
			}
			defer p.signal(syscall.SIGUSR2)
		}
		for i := range c.Repeats {
			po.Weight = 2 + i%2
			m := l.Mark()
			changed := time.Now()
			if err := WritePolicy(path, po); err != nil {
				return err
			}
			e, err := l.Wait(ctx, m, changed, WaitOptions{})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Log, "  policy file: %v\n", e)
			policyRes.Events = append(policyRes.Events, e)
		}
		for range c.Repeats {
			for _, up := range []bool{true, false} {
				m := l.Mark()
				var changed time.Time
				var err error
				if up {
					changed, err = engines.Queue(ctx, 0, maxQueue*3/4)
				} else {
					changed, err = engines.Release(ctx)
				}
				if err != nil {
					return err
				}
				e, err := l.Wait(ctx, m, changed, WaitOptions{Timeout: 10*c.Scrape + 30*time.Second})
				if err != nil {
					return err
				}
				fmt.Fprintf(c.Log, "  engine metrics (queue %s): %v\n", map[bool]string{true: "up", false: "down"}[up], e)
				metricsRes.Events = append(metricsRes.Events, e)
			}
		}
		return nil
	})
	metricsRes.RSSPerStream, metricsRes.HeapPerStream = policyRes.RSSPerStream, policyRes.HeapPerStream
	policyRes.Profiled, metricsRes.Profiled = profile, profile
	return []Result{policyRes, metricsRes}, err
}

// awaitMetric waits until a metric of p reaches at least v.
func awaitMetric(ctx context.Context, p *process, name string, v float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := p.metric(ctx, name)
		if err == nil && got >= v {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s reached %v, not %v, in %v (last error: %v)", p.name, name, got, v, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Table renders results as a Markdown table.
func Table(rs []Result) string {
	var b strings.Builder
	b.WriteString("| protocol | streams | server | change | events | detection | fan-out p50 | fan-out p99 | fan-out max | missed | extra | RSS/stream | heap/stream | p99 ÷ reference |\n")
	b.WriteString("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	for _, r := range rs {
		ratio := "—"
		if r.Server == "kvxds" && !math.IsNaN(r.FanoutRatio) && !math.IsInf(r.FanoutRatio, 0) {
			ratio = fmt.Sprintf("%.2f×", r.FanoutRatio)
		}
		server := r.Server
		if r.Profiled {
			server += " (profiled)"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %s | %s | %s | %s | %d | %d | %s | %s | %s |\n",
			protocol(r.Delta), r.Streams, server, r.Change, len(r.Events),
			ms(r.Median(func(e Event) time.Duration { return e.Detection })),
			ms(r.Median(func(e Event) time.Duration { return e.FanoutP50 })),
			ms(r.Median(func(e Event) time.Duration { return e.FanoutP99 })),
			ms(r.Median(func(e Event) time.Duration { return e.FanoutMax })),
			r.Missed(), r.Extra(), kib(r.RSSPerStream), kib(r.HeapPerStream), ratio)
	}
	b.WriteString("\nMedians over the events; detection: change → first stream; fan-out: first stream → p50/p99/last stream; missed: streams without the final version (summed); extra: responses with another version after a change (summed); memory: (with the streams − idle) ÷ streams; profiled: kvxds's controller run by serve-kvxds with the CPU profiler on.\n")
	return b.String()
}

func kib(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f KiB", v/1024)
}
