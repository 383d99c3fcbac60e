package adsload

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/controller"
)

func TestAnalyze(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	d := soakData{
		Streams: []streamRecord{
			{Node: "n-0", EDS: []Receipt{{"A", at(0)}, {"B", at(1100)}, {"C", at(1520)}, {"A", at(2100)}}},
			// Skips C, current for 580ms only.
			{Node: "n-1", EDS: []Receipt{{"A", at(5)}, {"B", at(1150)}, {"A", at(2150)}}},
			// B twice; C after A has recurred elsewhere: still C's epoch.
			{Node: "n-2", EDS: []Receipt{{"A", at(3)}, {"B", at(1120)}, {"B", at(1130)}, {"C", at(2120)}, {"A", at(2200)}}},
			// Rejecting, and stuck at B: misses C and the final A.
			{Node: "n-3", NACK: true, EDS: []Receipt{{"A", at(4)}, {"B", at(1200)}}},
		},
		Changes: []Change{
			{Kind: ChangeMetrics, Begin: at(1000), At: at(1010)},
			{Kind: ChangePolicy, Begin: at(1500), At: at(1500)},
			{Kind: ChangeMetrics, Begin: at(2000), At: at(2010)},
		},
		Start: at(900), End: at(4000), Bucket: time.Second, MinCurrent: time.Second,
	}
	a := analyze(d)

	var versions []string
	var causes []int
	for _, e := range a.Epochs {
		versions = append(versions, e.Version)
		causes = append(causes, e.Cause)
	}
	if got, want := strings.Join(versions, ","), "A,B,C,A"; got != want {
		t.Fatalf("epochs %s, want %s", got, want)
	}
	if got, want := causes, []int{-1, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("causes %v, want %v", got, want)
	}
	if got := a.Epochs[2].Current(); got != ms(580) {
		t.Errorf("C current for %v, want 580ms", got)
	}
	if got := a.Epochs[3].Current(); got != ms(1900) {
		t.Errorf("last A current for %v, want 1.9s", got)
	}
	if got := len(a.Epochs[2].Arrivals); got != 2 {
		t.Errorf("C reached %d streams, want 2", got)
	}
	want := soakAnalysis{
		Caused: 3, Duplicates: 1, NACKDuplicates: 0, NACKReceipts: 2,
		MissedFinal: 1, Misses: 3, MissesLong: 1, LongEpochs: 2, MissedLong: 1, MaxMissedShort: ms(580),
	}
	got := a
	got.Epochs, got.Buckets = nil, nil
	if !equalAnalysis(got, want) {
		t.Errorf("analysis %+v, want %+v", got, want)
	}

	if len(a.Buckets) != 4 {
		t.Fatalf("%d buckets, want 4", len(a.Buckets))
	}
	wantBuckets := []map[ChangeKind]kindStats{
		{
			ChangeMetrics: {Changes: 1, Versions: 1, P50: ms(110), P99: ms(190), Max: ms(190), FanoutP99Med: ms(100), FanoutP99Max: ms(100)},
			ChangePolicy:  {Changes: 1, Versions: 1, P50: ms(20), P99: ms(620), Max: ms(620), FanoutP99Med: ms(600), FanoutP99Max: ms(600)},
		},
		{
			ChangeMetrics: {Changes: 1, Versions: 1, P50: ms(140), P99: ms(190), Max: ms(190), FanoutP99Med: ms(100), FanoutP99Max: ms(100)},
			ChangePolicy:  {},
		},
		{ChangeMetrics: {}, ChangePolicy: {}},
		{ChangeMetrics: {}, ChangePolicy: {}},
	}
	for i, w := range wantBuckets {
		for k, ws := range w {
			if gs := a.Buckets[i].Kinds[k]; gs != ws {
				t.Errorf("bucket %d, %s: %+v, want %+v", i, k, gs, ws)
			}
		}
	}
}

func equalAnalysis(a, b soakAnalysis) bool {
	return a.Caused == b.Caused && a.Duplicates == b.Duplicates && a.NACKDuplicates == b.NACKDuplicates &&
		a.NACKReceipts == b.NACKReceipts && a.MissedFinal == b.MissedFinal && a.Misses == b.Misses &&
		a.MissesLong == b.MissesLong && a.LongEpochs == b.LongEpochs && a.MissedLong == b.MissedLong &&
		a.MaxMissedShort == b.MaxMissedShort
}

func TestDurationPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := durationPercentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p*100, got, c.want)
		}
	}
}

func TestNACKLogCheck(t *testing.T) {
	log := strings.Join([]string{
		`{"@level":"warn","@message":"client rejected configuration; not re-sending it until it changes","node":"n-1","type":"eds","version":"A"}`,
		`{"@level":"warn","@message":"client rejected configuration; not re-sending it until it changes","node":"n-1","type":"eds","version":"B"}`,
		`{"@level":"warn","@message":"client rejected configuration; not re-sending it until it changes","node":"n-1","type":"eds","version":"B"}`,
		`{"@level":"warn","@message":"client rejected configuration; not re-sending it until it changes","node":"n-1","type":"cds","version":"X"}`,
		`{"@level":"warn","@message":"something else","node":"n-1","type":"eds","version":"C"}`,
		`not json`,
		`{"@level":"warn","@message":"client rejected configuration; not re-sending it until it changes","node":"n-2","type":"eds","version":"A"}`,
	}, "\n")
	nl, err := parseNACKLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if nl.Lines != 4 {
		t.Errorf("%d EDS rejection lines, want 4", nl.Lines)
	}
	streams := []streamRecord{
		{Node: "n-0", EDS: []Receipt{{Version: "A"}}},
		{Node: "n-1", NACK: true, EDS: []Receipt{{Version: "A"}, {Version: "B"}, {Version: "C"}}},
		{Node: "n-2", NACK: true, EDS: []Receipt{{Version: "A"}, {Version: "B"}, {Version: "A"}}},
	}
	got := checkNACKLog(streams, nl)
	// n-1: B logged twice (over), C never (under); n-2: A received twice
	// but logged once, B never (two under).
	want := nackCheck{Streams: 2, Expected: 6, Logged: 4, Over: 1, Under: 3}
	if got != want {
		t.Errorf("check %+v, want %+v", got, want)
	}
	r := &SoakReport{NACK: got}
	if len(r.Failures()) != 1 {
		t.Errorf("failures %q, want one about the log", r.Failures())
	}
}

// inProcess runs kvxds's controller in this process.
func inProcess(t *testing.T) Server {
	return func(ctx context.Context, policyFile string, log io.Writer) (Running, error) {
		logger := hclog.New(&hclog.LoggerOptions{Name: "kvxds", Level: hclog.Warn, Output: log, JSONFormat: true})
		c, err := controller.New(controller.Options{PolicyFile: policyFile, Logger: logger, Version: "soak"})
		if err != nil {
			return Running{}, err
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return Running{PID: os.Getpid(), Stop: func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("kvxds: %v", err)
			}
		}}, nil
	}
}

// A short soak against kvxds in this process: every change reaches every
// stream, rejections are logged once per version, and the report says so.
func TestSoakSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 10 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep, err := Soak(ctx, SoakConfig{
		Server: inProcess(t), Streams: 20, Duration: 5 * time.Second,
		Endpoints: 4, Scrape: 100 * time.Millisecond, WeightEvery: time.Second, PolicyEvery: 2 * time.Second,
		SampleEvery: 2 * time.Second, Settle: 500 * time.Millisecond, Quiet: time.Second, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	t.Logf("\n%s", md)
	if f := rep.Failures(); len(f) > 0 {
		t.Errorf("failures: %q", f)
	}
	if n := rep.Changes[ChangeMetrics]; n < 4 {
		t.Errorf("%d engine-metrics changes in 5 s, want at least 4", n)
	}
	if n := rep.Changes[ChangePolicy]; n < 2 {
		t.Errorf("%d policy edits in 5 s, want at least 2", n)
	}
	// kvxds may fold changes that come close together into one version
	// (more so under the race detector), but not all of them.
	caused := 0
	for _, b := range rep.Analysis.Buckets {
		for _, st := range b.Kinds {
			caused += st.Versions
		}
	}
	if caused != rep.Analysis.Caused || caused < 2 {
		t.Errorf("%d versions caused by changes (%d in the latency table), want at least 2", rep.Analysis.Caused, caused)
	}
	if rep.VersionsServed < float64(rep.Analysis.Caused) {
		t.Errorf("kvxds counted %v new EDS versions, the streams saw %d", rep.VersionsServed, rep.Analysis.Caused)
	}
	if rep.NACK.Streams != 1 || rep.NACK.Expected < 2 {
		t.Errorf("rejecting streams: %+v, after %d versions", rep.NACK, rep.Analysis.Caused)
	}
	if rep.NACKsCounted != float64(rep.NACK.Expected) {
		t.Errorf("kvxds counted %v EDS rejections, the streams rejected %d", rep.NACKsCounted, rep.NACK.Expected)
	}
	if len(rep.Samples) < 2 || rep.Start.Goroutines <= 0 || rep.End.HeapInuse <= 0 || rep.End.Streams != 20 {
		t.Errorf("footprint: start %v, end %v, %d samples", rep.Start, rep.End, len(rep.Samples))
	}
	for _, want := range []string{"## Summary", "| from | change |", "## kvxds footprint"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
