package adsload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Server runs kvxds on a policy file (hot-reloaded), logging JSON at warn
// level or below to log, until the returned Running is stopped.
type Server func(ctx context.Context, policyFile string, log io.Writer) (Running, error)

// Running is a kvxds being soaked.
type Running struct {
	// PID is the process whose memory is read.
	PID int
	// Stop ends it and waits for it to end.
	Stop func()
}

// BinaryServer runs the kvxds binary at path as
// `kvxds serve --policy FILE --log-format json --log-level warn`.
func BinaryServer(path string) Server {
	return func(_ context.Context, policyFile string, log io.Writer) (Running, error) {
		p, err := startProcess("kvxds", "", log, path, "serve", "--policy", policyFile, "--log-format", "json", "--log-level", "warn")
		if err != nil {
			return Running{}, err
		}
		return Running{PID: p.cmd.Process.Pid, Stop: p.stop}, nil
	}
}

// SoakConfig configures Soak.
type SoakConfig struct {
	// Server runs kvxds.
	Server Server
	// Streams is the number of ADS streams; NACKStreams of them reject
	// every EDS response (0: 1% of Streams, rounded up; negative: none).
	Streams, NACKStreams int
	// Delta uses incremental xDS instead of state of the world.
	Delta bool
	// Conns, Concurrency: see Options.
	Conns, Concurrency int
	// Duration is how long the changes run; default 10m.
	Duration time.Duration
	// Endpoints is the pool size (simulated engines); default 20. Scrape
	// is kvxds's metrics interval; default 250ms.
	Endpoints int
	Scrape    time.Duration
	// WeightEvery is the period of the engine-metrics changes (default
	// 1s), PolicyEvery that of the policy edits (default 30s, the first
	// half a weight period after the start).
	WeightEvery, PolicyEvery time.Duration
	// SampleEvery is the period of the footprint samples and of the rows
	// of the latency table; default 1m.
	SampleEvery time.Duration
	// Settle is the wait between the streams being configured and the
	// first sample; default 5s. Quiet is how long nothing may arrive
	// before the end is measured; default 3s.
	Settle, Quiet time.Duration
	// MinCurrent is how long a version must stay current for every
	// stream to be owed it; default 1s.
	MinCurrent time.Duration
	// Dir receives the policy, kvxds's log and the report.
	Dir string
	// Log receives progress.
	Log io.Writer
}

func (c *SoakConfig) defaults() {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Minute
	}
	if c.Endpoints <= 0 {
		c.Endpoints = 20
	}
	if c.Scrape <= 0 {
		c.Scrape = 250 * time.Millisecond
	}
	if c.WeightEvery <= 0 {
		c.WeightEvery = time.Second
	}
	if c.PolicyEvery <= 0 {
		c.PolicyEvery = 30 * time.Second
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = time.Minute
	}
	if c.Settle <= 0 {
		c.Settle = 5 * time.Second
	}
	if c.Quiet <= 0 {
		c.Quiet = 3 * time.Second
	}
	if c.MinCurrent <= 0 {
		c.MinCurrent = time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// nackStreams is how many streams reject every EDS response.
func (c SoakConfig) nackStreams() int {
	switch {
	case c.NACKStreams < 0:
		return 0
	case c.NACKStreams == 0:
		return min(c.Streams, (c.Streams+99)/100)
	}
	return min(c.NACKStreams, c.Streams)
}

// Soak runs kvxds under c.Streams ADS streams while one engine's queue
// goes up and down every WeightEvery and the policy is edited every
// PolicyEvery, samples kvxds's footprint every SampleEvery, and reports
// missed updates, push latency and how rejections were handled. The
// report is also written to Dir/soak.md.
func Soak(ctx context.Context, c SoakConfig) (*SoakReport, error) {
	c.defaults()
	if c.Server == nil {
		return nil, errors.New("soak: no Server")
	}
	if c.Streams <= 0 {
		return nil, errors.New("soak: Streams must be positive")
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", c.Dir, err)
	}
	limit, err := RaiseFileLimit()
	if err != nil {
		return nil, err
	}
	conns := c.Streams
	if c.Conns > 0 {
		conns = min(c.Conns, c.Streams)
	}
	if need := uint64(conns) + uint64(2*c.Endpoints) + 256; need > limit {
		return nil, fmt.Errorf("soak: %d streams need about %d file descriptors, the limit is %d", c.Streams, need, limit)
	}

	engines, err := StartEngines(c.Endpoints)
	if err != nil {
		return nil, err
	}
	defer engines.Close()
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	policyPath := filepath.Join(c.Dir, "kvxds.hcl")
	po := PolicyOptions{XDS: xdsAddr, Admin: adminAddr, Endpoints: engines.Addrs(), Weight: 1, Scrape: c.Scrape}
	if err := WritePolicy(policyPath, po); err != nil {
		return nil, err
	}
	logPath := filepath.Join(c.Dir, "kvxds.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating kvxds's log: %w", err)
	}
	defer logFile.Close()
	srv, err := c.Server(ctx, policyPath, logFile)
	if err != nil {
		return nil, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Stop()
		}
	}
	defer stop()
	admin := adminClient{addr: adminAddr, pid: srv.PID}
	if err := admin.awaitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	// Every engine scraped at least twice, so weights have settled.
	if err := admin.await(ctx, "kvxds_scrapes_total", float64(2*c.Endpoints), 30*time.Second); err != nil {
		return nil, err
	}
	nacks0, err := admin.value(ctx, "kvxds_xds_nacks_total", map[string]string{"type": "eds"})
	if err != nil {
		return nil, err
	}

	nNACK := c.nackStreams()
	opened := time.Now()
	var loads []*Load
	defer func() {
		for _, l := range loads {
			l.Close()
		}
	}()
	if n := c.Streams - nNACK; n > 0 {
		l, err := Start(ctx, Options{Target: xdsAddr, Streams: n, Delta: c.Delta, Conns: c.Conns, Concurrency: c.Concurrency, NodePrefix: "envoy"})
		if err != nil {
			return nil, err
		}
		loads = append(loads, l)
	}
	if nNACK > 0 {
		l, err := Start(ctx, Options{Target: xdsAddr, Streams: nNACK, Delta: c.Delta, Concurrency: c.Concurrency, NodePrefix: "envoy-nack", NACK: true})
		if err != nil {
			return nil, err
		}
		loads = append(loads, l)
	}
	fmt.Fprintf(c.Log, "%d streams (%d rejecting EDS) open and configured in %v\n", c.Streams, nNACK, time.Since(opened).Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.Settle):
	}

	rep := &SoakReport{Config: c, Changes: map[ChangeKind]int{}}
	start := time.Now()
	if rep.Start, err = admin.sample(ctx, 0); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "start: %s\n", rep.Start)
	versions0, err := admin.value(ctx, "kvxds_xds_versions_total", map[string]string{"clients": "envoy", "type": "eds"})
	if err != nil {
		return nil, err
	}

	var (
		mu      sync.Mutex
		changes []Change
	)
	record := func(ch Change) {
		mu.Lock()
		changes = append(changes, ch)
		mu.Unlock()
	}
	runCtx, cancelRun := context.WithTimeout(ctx, c.Duration)
	defer cancelRun()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Add(3)
	go func() {
		defer wg.Done()
		errs[0] = driveWeights(ctx, runCtx, engines, c.WeightEvery, record)
	}()
	go func() {
		defer wg.Done()
		errs[1] = editPolicy(runCtx, policyPath, po, c.WeightEvery/2, c.PolicyEvery, record)
	}()
	go func() {
		defer wg.Done()
		errs[2] = c.watch(runCtx, admin, start, loads, func(s Sample) { rep.Samples = append(rep.Samples, s) })
	}()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rep.Duration = time.Since(start)

	// Let every stream catch up with the last change.
	if err := awaitQuiet(ctx, loads, c.Quiet, time.Minute); err != nil {
		return nil, err
	}
	if rep.End, err = admin.sample(ctx, time.Since(start)); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "end: %s\n", rep.End)
	versions1, err := admin.value(ctx, "kvxds_xds_versions_total", map[string]string{"clients": "envoy", "type": "eds"})
	if err != nil {
		return nil, err
	}
	nacks1, err := admin.value(ctx, "kvxds_xds_nacks_total", map[string]string{"type": "eds"})
	if err != nil {
		return nil, err
	}
	rep.VersionsServed, rep.NACKsCounted = versions1-versions0, nacks1-nacks0
	end := time.Now()

	var streams []streamRecord
	for _, l := range loads {
		for i, eds := range l.EDS(nil) {
			streams = append(streams, streamRecord{Node: l.streams[i].node.GetId(), NACK: l.opts.NACK, EDS: eds})
		}
	}
	for _, l := range loads {
		l.Close()
	}
	loads = nil
	stop()
	for _, ch := range changes {
		rep.Changes[ch.Kind]++
	}
	rep.Analysis = analyze(soakData{Streams: streams, Changes: changes, Start: start, End: end, Bucket: c.SampleEvery, MinCurrent: c.MinCurrent})

	if err := logFile.Sync(); err != nil {
		return nil, fmt.Errorf("flushing kvxds's log: %w", err)
	}
	lf, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("reading kvxds's log: %w", err)
	}
	nl, err := parseNACKLog(lf)
	lf.Close()
	if err != nil {
		return nil, err
	}
	rep.NACK = checkNACKLog(streams, nl)

	if err := os.WriteFile(filepath.Join(c.Dir, "soak.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return rep, fmt.Errorf("writing the report: %w", err)
	}
	return rep, nil
}

// driveWeights alternately queues requests on engine 0 and releases them,
// one change every period, until run is done. A change under way when run
// ends is completed and recorded (under ctx), so that every version kvxds
// serves has its cause.
func driveWeights(ctx, run context.Context, engines *Engines, period time.Duration, record func(Change)) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	up := true
	for {
		begin := time.Now()
		var at time.Time
		var err error
		if up {
			at, err = engines.Queue(ctx, 0, maxQueue*3/4)
		} else {
			at, err = engines.Release(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("driving engine 0's queue: %w", err)
		}
		record(Change{Kind: ChangeMetrics, Begin: begin, At: at})
		up = !up
		select {
		case <-run.Done():
			return nil
		case <-tick.C:
		}
	}
}

// editPolicy rewrites the policy every period, the first time after
// offset, toggling every endpoint's static weight between 2 and 1.
func editPolicy(ctx context.Context, path string, po PolicyOptions, offset, period time.Duration, record func(Change)) error {
	next := time.Now().Add(offset)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		po.Weight = 2 - i%2
		at := time.Now()
		if err := WritePolicy(path, po); err != nil {
			return err
		}
		record(Change{Kind: ChangePolicy, Begin: at, At: at})
		next = next.Add(period)
	}
}

// watch samples kvxds's footprint every SampleEvery and fails if a
// stream ends, until ctx is done.
func (c SoakConfig) watch(ctx context.Context, admin adminClient, start time.Time, loads []*Load, add func(Sample)) error {
	sampleTick := time.NewTicker(c.SampleEvery)
	defer sampleTick.Stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-check.C:
			for _, l := range loads {
				if err := l.Failed(); err != nil {
					return err
				}
			}
		case <-sampleTick.C:
			s, err := admin.sample(ctx, time.Since(start))
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Log, "%s\n", s)
			add(s)
		}
	}
}

// awaitQuiet waits until no stream has received anything for quiet, or
// timeout.
func awaitQuiet(ctx context.Context, loads []*Load, quiet, timeout time.Duration) error {
	total := func() int64 {
		var n int64
		for _, l := range loads {
			n += l.Received()
		}
		return n
	}
	deadline := time.Now().Add(timeout)
	last, since := total(), time.Now()
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if n := total(); n != last {
			last, since = n, time.Now()
		}
	}
	for _, l := range loads {
		if err := l.Failed(); err != nil {
			return err
		}
	}
	return nil
}

func (s Sample) String() string {
	return fmt.Sprintf("%v: RSS %s, heap in use %s, %.0f goroutines, %.0f streams",
		s.Elapsed.Round(time.Second), mib(s.RSS), mib(s.HeapInuse), s.Goroutines, s.Streams)
}

// adminClient reads kvxds's admin endpoints and its process's memory.
type adminClient struct {
	addr string
	pid  int
}

func (a adminClient) awaitReady(ctx context.Context, timeout time.Duration) error {
	return awaitReadyz(ctx, "kvxds", a.addr, timeout, func() error { return nil })
}

// value sums the series of a metric whose labels include want.
func (a adminClient) value(ctx context.Context, name string, want map[string]string) (float64, error) {
	fams, err := scrape(ctx, "http://"+a.addr+"/metrics")
	if err != nil {
		return 0, err
	}
	return sumMatching(fams[name], want), nil
}

// await waits until a metric reaches at least v.
func (a adminClient) await(ctx context.Context, name string, v float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := a.value(ctx, name, nil)
		if err == nil && got >= v {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kvxds: %s reached %v, not %v, in %v (last error: %v)", name, got, v, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sample reads kvxds's RSS, heap, goroutines and streams.
func (a adminClient) sample(ctx context.Context, elapsed time.Duration) (Sample, error) {
	rss, err := vmRSS(a.pid)
	if err != nil {
		return Sample{}, err
	}
	fams, err := scrape(ctx, "http://"+a.addr+"/metrics")
	if err != nil {
		return Sample{}, err
	}
	return Sample{
		Elapsed:    elapsed,
		RSS:        rss,
		HeapInuse:  gauge(fams, "go_memstats_heap_inuse_bytes"),
		Goroutines: gauge(fams, "go_goroutines"),
		Streams:    gauge(fams, "kvxds_xds_streams"),
	}, nil
}

// sumMatching sums the values of a family's series whose labels include
// want: 0 without a matching series (a vector's series appear with their
// first increment).
func sumMatching(f *dto.MetricFamily, want map[string]string) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}
