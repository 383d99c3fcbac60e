package adsload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// ChangeKind is what a soak changed.
type ChangeKind string

// The kinds of change a soak makes.
const (
	ChangeMetrics ChangeKind = "engine metrics"
	ChangePolicy  ChangeKind = "policy file"
)

var changeKinds = []ChangeKind{ChangeMetrics, ChangePolicy}

// Change is one change of kvxds's inputs during a soak.
type Change struct {
	Kind ChangeKind
	// Begin is when the change was started: the first queued request was
	// sent or cancelled, or the policy file was about to be replaced.
	Begin time.Time
	// At is when it took effect: the engine's metrics page first showed
	// the new queue, or the policy file was about to be replaced. Push
	// latency runs from At.
	At time.Time
}

// streamRecord is what one stream received over a soak.
type streamRecord struct {
	Node string
	NACK bool
	EDS  []Receipt
}

// soakData is the raw material of a soak's analysis.
type soakData struct {
	Streams []streamRecord
	// Changes, in the order they were made.
	Changes []Change
	// Start is when the changes began, End when the run ended (after the
	// final quiet period).
	Start, End time.Time
	// Bucket is the width of a row of the latency table.
	Bucket time.Duration
	// MinCurrent is how long a version must stay current for every
	// stream to be owed it.
	MinCurrent time.Duration
}

// epoch is one period during which kvxds served one EDS version, as the
// streams saw it: it starts with the first stream receiving the version
// and ends when the next epoch starts. A version string can recur (weights
// that go back and forth hash alike); each recurrence is its own epoch.
type epoch struct {
	Version    string
	Start, End time.Time
	// Cause indexes soakData.Changes: the last change begun before Start;
	// -1 for versions served before the first change.
	Cause int
	// Arrivals holds each receiving stream's receive time, sorted.
	Arrivals []time.Time
}

// Current is how long the epoch's version stayed the newest.
func (e epoch) Current() time.Duration { return e.End.Sub(e.Start) }

// kindStats are one kind of change's figures over one bucket.
type kindStats struct {
	Changes  int // changes made
	Versions int // epochs they caused
	// Latency from the change to each stream receiving its version.
	P50, P99, Max time.Duration
	// FanoutP99Med and FanoutP99Max are the median and the largest, over
	// the epochs, of the first stream → 99th percentile stream time.
	FanoutP99Med, FanoutP99Max time.Duration
}

// bucketStats are the latency figures of one bucket of the run.
type bucketStats struct {
	Index int // Start + Index*Bucket
	Kinds map[ChangeKind]kindStats
}

// soakAnalysis is what a soak's receipts say.
type soakAnalysis struct {
	Epochs []epoch
	// Caused counts the epochs caused by changes (after the first one).
	Caused int
	// Duplicates counts receipts repeating the stream's previous version,
	// on acknowledging and on rejecting streams.
	Duplicates, NACKDuplicates int
	// NACKReceipts counts the rejecting streams' receipts.
	NACKReceipts int
	// MissedFinal counts streams not holding the last version at the end.
	MissedFinal int
	// Misses counts (stream, epoch) pairs where the stream never received
	// the epoch's version; MissesLong those of epochs current for at least
	// MinCurrent, LongEpochs how many such epochs there were, and
	// MissedLong the streams that missed at least one of them.
	Misses, MissesLong, LongEpochs, MissedLong int
	// MaxMissedShort is the longest time current of an epoch some stream
	// missed, among those shorter than MinCurrent.
	MaxMissedShort time.Duration
	Buckets        []bucketStats
}

// analyze reconstructs the epochs from every stream's receipts and
// measures them.
func analyze(d soakData) soakAnalysis {
	type item struct {
		stream int
		r      Receipt
	}
	var all []item
	for i, s := range d.Streams {
		for _, r := range s.EDS {
			all = append(all, item{i, r})
		}
	}
	slices.SortStableFunc(all, func(a, b item) int { return a.r.At.Compare(b.r.At) })

	var a soakAnalysis
	lastEpoch := make([]int, len(d.Streams))
	for i := range lastEpoch {
		lastEpoch[i] = -1
	}
	lastVersion := make([]string, len(d.Streams))
	got := make([]map[int]bool, len(d.Streams))
	for i := range got {
		got[i] = map[int]bool{}
	}
	for _, it := range all {
		s, r := it.stream, it.r
		if d.Streams[s].NACK {
			a.NACKReceipts++
		}
		if lastEpoch[s] >= 0 && r.Version == lastVersion[s] {
			if d.Streams[s].NACK {
				a.NACKDuplicates++
			} else {
				a.Duplicates++
			}
			continue
		}
		// A stream that receives a version gets the newest epoch of that
		// version after the one it held; a version no such epoch has
		// starts a new one.
		e := -1
		for k := len(a.Epochs) - 1; k > lastEpoch[s]; k-- {
			if a.Epochs[k].Version == r.Version {
				e = k
				break
			}
		}
		if e < 0 {
			a.Epochs = append(a.Epochs, epoch{Version: r.Version, Start: r.At, Cause: -1})
			e = len(a.Epochs) - 1
		}
		a.Epochs[e].Arrivals = append(a.Epochs[e].Arrivals, r.At)
		lastEpoch[s], lastVersion[s] = e, r.Version
		got[s][e] = true
	}
	for k := range a.Epochs {
		if k+1 < len(a.Epochs) {
			a.Epochs[k].End = a.Epochs[k+1].Start
		} else {
			a.Epochs[k].End = d.End
		}
		slices.SortFunc(a.Epochs[k].Arrivals, func(x, y time.Time) int { return x.Compare(y) })
		// The cause is the last change begun before the version appeared.
		for c := len(d.Changes) - 1; c >= 0; c-- {
			if !d.Changes[c].Begin.After(a.Epochs[k].Start) {
				a.Epochs[k].Cause = c
				break
			}
		}
		if a.Epochs[k].Cause >= 0 {
			a.Caused++
		}
	}

	// Missed updates.
	last := len(a.Epochs) - 1
	for s := range d.Streams {
		if last >= 0 && lastEpoch[s] != last {
			a.MissedFinal++
		}
		missedLong := false
		for k, e := range a.Epochs {
			if got[s][k] {
				continue
			}
			a.Misses++
			if e.Current() >= d.MinCurrent {
				a.MissesLong++
				missedLong = true
			} else {
				a.MaxMissedShort = max(a.MaxMissedShort, e.Current())
			}
		}
		if missedLong {
			a.MissedLong++
		}
	}
	for _, e := range a.Epochs {
		if e.Current() >= d.MinCurrent {
			a.LongEpochs++
		}
	}

	a.Buckets = bucketize(d, a.Epochs)
	return a
}

// bucketize computes the latency figures of every bucket of the run, by
// the time of the change.
func bucketize(d soakData, epochs []epoch) []bucketStats {
	if d.Bucket <= 0 {
		d.Bucket = time.Minute
	}
	n := int(d.End.Sub(d.Start)/d.Bucket) + 1
	type acc struct {
		changes, versions int
		latencies         []time.Duration
		fanouts           []time.Duration
	}
	index := func(t time.Time) int { return max(0, min(n-1, int(t.Sub(d.Start)/d.Bucket))) }
	accs := make([]map[ChangeKind]*acc, n)
	for i := range accs {
		accs[i] = map[ChangeKind]*acc{}
		for _, k := range changeKinds {
			accs[i][k] = &acc{}
		}
	}
	for _, c := range d.Changes {
		if b, ok := accs[index(c.At)][c.Kind]; ok {
			b.changes++
		}
	}
	for _, e := range epochs {
		if e.Cause < 0 || len(e.Arrivals) == 0 {
			continue
		}
		c := d.Changes[e.Cause]
		b, ok := accs[index(c.At)][c.Kind]
		if !ok {
			continue
		}
		b.versions++
		for _, t := range e.Arrivals {
			b.latencies = append(b.latencies, t.Sub(c.At))
		}
		first := e.Arrivals[0]
		b.fanouts = append(b.fanouts, percentile(e.Arrivals, 0.99).Sub(first))
	}
	out := make([]bucketStats, n)
	for i := range out {
		out[i] = bucketStats{Index: i, Kinds: map[ChangeKind]kindStats{}}
		for _, k := range changeKinds {
			b := accs[i][k]
			st := kindStats{Changes: b.changes, Versions: b.versions}
			if len(b.latencies) > 0 {
				slices.Sort(b.latencies)
				st.P50 = durationPercentile(b.latencies, 0.50)
				st.P99 = durationPercentile(b.latencies, 0.99)
				st.Max = b.latencies[len(b.latencies)-1]
			}
			if len(b.fanouts) > 0 {
				slices.Sort(b.fanouts)
				st.FanoutP99Med = durationPercentile(b.fanouts, 0.50)
				st.FanoutP99Max = b.fanouts[len(b.fanouts)-1]
			}
			out[i].Kinds[k] = st
		}
	}
	return out
}

// durationPercentile is the nearest-rank percentile of sorted durations.
func durationPercentile(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

// nackLogMessage is the message kvxds logs when a client rejects a
// configuration.
const nackLogMessage = "client rejected configuration"

// nackLog counts kvxds's rejection log lines by node and version.
type nackLog struct {
	Lines int
	// ByNodeVersion counts EDS rejection lines per "node\x00version".
	ByNodeVersion map[string]int
}

// parseNACKLog reads kvxds's JSON log and counts its EDS rejection lines.
// Lines that are not JSON are skipped.
func parseNACKLog(r io.Reader) (nackLog, error) {
	out := nackLog{ByNodeVersion: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Message string `json:"@message"`
			Node    string `json:"node"`
			Type    string `json:"type"`
			Version string `json:"version"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if !strings.HasPrefix(line.Message, nackLogMessage) || line.Type != "eds" {
			continue
		}
		out.Lines++
		out.ByNodeVersion[line.Node+"\x00"+line.Version]++
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading kvxds's log: %w", err)
	}
	return out, nil
}

// nackCheck compares the rejection log lines with what the rejecting
// streams received: one line per version received.
type nackCheck struct {
	Streams  int
	Expected int // receipts of the rejecting streams
	Logged   int // EDS rejection lines
	// Over and Under count (node, version) pairs logged more, or fewer,
	// times than the stream received the version.
	Over, Under int
}

func checkNACKLog(streams []streamRecord, log nackLog) nackCheck {
	want := map[string]int{}
	var c nackCheck
	for _, s := range streams {
		if !s.NACK {
			continue
		}
		c.Streams++
		for _, r := range s.EDS {
			want[s.Node+"\x00"+r.Version]++
			c.Expected++
		}
	}
	c.Logged = log.Lines
	for k, n := range want {
		if log.ByNodeVersion[k] < n {
			c.Under++
		}
	}
	for k, n := range log.ByNodeVersion {
		if n > want[k] {
			c.Over++
		}
	}
	return c
}

// Sample is kvxds's footprint at one moment of a soak.
type Sample struct {
	Elapsed    time.Duration // since the changes began
	RSS        float64       // VmRSS, bytes
	HeapInuse  float64       // go_memstats_heap_inuse_bytes
	Goroutines float64       // go_goroutines
	Streams    float64       // kvxds_xds_streams
}

// SoakReport is the outcome of a soak.
type SoakReport struct {
	Config   SoakConfig
	Duration time.Duration // of the changes
	// Start is the footprint once the streams are connected and settled,
	// End after the last change and a quiet period, Samples in between.
	Start, End Sample
	Samples    []Sample
	Changes    map[ChangeKind]int
	// VersionsServed is the growth of kvxds_xds_versions_total for
	// Envoy's EDS while the changes ran; NACKsCounted that of
	// kvxds_xds_nacks_total for EDS over the run.
	VersionsServed, NACKsCounted float64
	Analysis                     soakAnalysis
	NACK                         nackCheck
}

// Failures lists what must not happen: missed updates, re-sends, and
// rejections logged other than once per version.
func (r *SoakReport) Failures() []string {
	a := r.Analysis
	var out []string
	if a.MissedFinal > 0 {
		out = append(out, fmt.Sprintf("%d streams did not hold the final version", a.MissedFinal))
	}
	if a.MissedLong > 0 {
		out = append(out, fmt.Sprintf("%d streams missed a version current for %v or more", a.MissedLong, r.Config.MinCurrent))
	}
	if a.Duplicates+a.NACKDuplicates > 0 {
		out = append(out, fmt.Sprintf("%d responses re-sent a version the stream already had (%d to rejecting streams)",
			a.Duplicates+a.NACKDuplicates, a.NACKDuplicates))
	}
	if n := r.NACK; n.Over > 0 || n.Under > 0 || n.Logged != n.Expected {
		out = append(out, fmt.Sprintf("%d rejection log lines for %d rejected responses (%d versions logged more than once, %d not logged)",
			n.Logged, n.Expected, n.Over, n.Under))
	}
	return out
}

// Markdown renders the report.
func (r *SoakReport) Markdown() string {
	var b strings.Builder
	c, a := r.Config, r.Analysis
	proto := protocol(c.Delta)
	fmt.Fprintf(&b, "# kvxds soak: %d ADS streams (%s), %v\n\n", c.Streams, proto, r.Duration.Round(time.Second))
	fmt.Fprintf(&b, "%d CPUs, shared with other work: timings and memory are noisy. Pool of %d simulated vLLM engines scraped every %v; "+
		"an engine-metrics change every %v (one engine's queue driven to %d and back, halving then restoring its weight multiplier), "+
		"a policy edit every %v (every endpoint's static weight, file replaced by a rename); %d of the streams reject every EDS response.\n\n",
		runtime.NumCPU(), c.Endpoints, c.Scrape, c.WeightEvery, maxQueue*3/4, c.PolicyEvery, c.nackStreams())

	b.WriteString("## Summary\n\n| check | value |\n|---|---:|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("engine-metrics changes / policy edits", fmt.Sprintf("%d / %d", r.Changes[ChangeMetrics], r.Changes[ChangePolicy]))
	row("EDS versions served while changing (kvxds_xds_versions_total, Envoy)", fmt.Sprintf("%.0f", r.VersionsServed))
	row("EDS versions the streams saw (all / after a change)", fmt.Sprintf("%d / %d", len(a.Epochs), a.Caused))
	row("streams without the final version at the end", a.MissedFinal)
	row(fmt.Sprintf("streams that missed a version current ≥ %v (versions: %d)", c.MinCurrent, a.LongEpochs), a.MissedLong)
	row("(stream, version) pairs missed, all versions / current ≥ "+c.MinCurrent.String(), fmt.Sprintf("%d / %d", a.Misses, a.MissesLong))
	row("longest-current version some stream skipped", a.MaxMissedShort.Round(time.Millisecond))
	row("versions re-sent to a stream that had them (acknowledging / rejecting)", fmt.Sprintf("%d / %d", a.Duplicates, a.NACKDuplicates))
	row("rejecting streams: EDS responses received and rejected", r.NACK.Expected)
	row("kvxds rejection log lines (EDS) / kvxds_xds_nacks_total{type=\"eds\"}", fmt.Sprintf("%d / %.0f", r.NACK.Logged, r.NACKsCounted))
	row("(node, version) logged more than once / not logged", fmt.Sprintf("%d / %d", r.NACK.Over, r.NACK.Under))
	if f := r.Failures(); len(f) > 0 {
		row("**failures**", strings.Join(f, "; "))
	} else {
		row("failures", "none")
	}

	b.WriteString("\n## kvxds footprint\n\n| at | RSS | Go heap in use | goroutines | ADS streams |\n|---|---:|---:|---:|---:|\n")
	sample := func(label string, s Sample) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f |\n", label, mib(s.RSS), mib(s.HeapInuse), s.Goroutines, s.Streams)
	}
	sample("start (streams settled)", r.Start)
	for _, s := range r.Samples {
		sample(fmt.Sprintf("%v", s.Elapsed.Round(time.Second)), s)
	}
	sample(fmt.Sprintf("end (%v)", r.End.Elapsed.Round(time.Second)), r.End)

	fmt.Fprintf(&b, "\n## Push latency by %v\n\n", c.SampleEvery)
	b.WriteString("| from | change | changes | versions | latency p50 | p99 | max | fan-out p99 (median / worst) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, bk := range a.Buckets {
		for _, k := range changeKinds {
			st := bk.Kinds[k]
			if st.Changes == 0 && st.Versions == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %v | %s | %d | %d | %s | %s | %s | %s / %s |\n",
				time.Duration(bk.Index)*c.SampleEvery, k, st.Changes, st.Versions,
				msec(st.P50), msec(st.P99), msec(st.Max), msec(st.FanoutP99Med), msec(st.FanoutP99Max))
		}
	}
	b.WriteString("\nLatency: from the change taking effect (the engine's page showing the queue, or the policy file being replaced) to each stream receiving the version it caused, over every stream and version of the period; " +
		"a version is caused by the last change begun before the first stream received it, and a change that kvxds folded into another one's version causes none. " +
		"Engine-metrics latency includes waiting for kvxds's next scrape. Fan-out: first stream → 99th-percentile stream of one version.\n")
	return b.String()
}

func mib(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", v/(1<<20))
}

func msec(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
