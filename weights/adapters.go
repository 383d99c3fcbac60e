package weights

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Adapters is a replica's LoRA adapter state as its engine reports it:
// vLLM's vllm:lora_requests_info, the only engine metric that names
// adapters (docs/concepts/weights.md compares the engines).
//
// It says which adapters have requests in flight, not which are loaded:
// an adapter whose requests all finished drops out of the lists while it
// may stay loaded until evicted, so an adapter that is absent is idle, not
// necessarily unloaded. Today's vLLM writes every adapter with a request in
// flight into both lists (LoRARequestStates.update_scheduler_stats), so
// Running and Waiting are the same set; versions up to late 2025 listed
// each adapter only where it had requests.
//
// An Adapters is never modified once Extract returns it; Signals copies
// share it.
type Adapters struct {
	// Running and Waiting are the adapter names of running_lora_adapters
	// and waiting_lora_adapters: split at commas, blanks trimmed, empty
	// names dropped, sorted, each once.
	Running []string
	Waiting []string
	// MaxLoRA is the max_lora label (--max-loras: adapters one batch may
	// hold); 0 when it is missing or not a non-negative integer.
	MaxLoRA int
	// Observed is when the engine wrote the series: its value, a Unix
	// time. vLLM writes it on every engine step with scheduler stats and
	// not while idle, so an old Observed on a fresh scrape means an idle
	// engine whose lists are those of its last busy step.
	Observed time.Time
	// Overfull is set when Running names more adapters than MaxLoRA
	// allows (MaxLoRA > 0). The lists are believed as reported: with
	// today's vLLM, whose running list holds every adapter in flight,
	// it means requests wait for an adapter slot.
	Overfull bool
}

// InFlight returns the adapters with requests running or waiting, sorted.
func (a *Adapters) InFlight() []string {
	if a == nil {
		return nil
	}
	out := slices.Concat(a.Running, a.Waiting)
	slices.Sort(out)
	return slices.Compact(out)
}

// Has reports whether the adapter has requests in flight.
func (a *Adapters) Has(name string) bool {
	if a == nil {
		return false
	}
	_, r := slices.BinarySearch(a.Running, name)
	_, w := slices.BinarySearch(a.Waiting, name)
	return r || w
}

// Label names of vLLM's vllm:lora_requests_info (vllm/v1/metrics/loggers.py).
const (
	labelMaxLoRA         = "max_lora"
	labelRunningAdapters = "running_lora_adapters"
	labelWaitingAdapters = "waiting_lora_adapters"
)

// maxAdapterTime bounds the Unix time a series may carry (year 5138): a
// larger value is no time an engine wrote.
const maxAdapterTime = 1e11

// adapters evaluates the first present alternative of an adapter-info
// gauge: the series with the largest value wins, as the engine writes the
// current time into the series of the current lists and leaves the older
// series behind. Series whose value is not a positive, finite time are
// skipped rather than failing the scrape: the adapter state is an extra
// that must not cost a replica its weight. Among series of equal time the
// one whose labels sort last wins, so the choice never depends on line
// order. nil when no series qualifies.
func (x *extractor) adapters(alts []Series) *Adapters {
	for i := range alts {
		s := &alts[i]
		f := x.family(s.Name)
		if f == nil {
			continue
		}
		var best *dto.Metric
		var bestV float64
		var bestKey string
		for _, m := range f.GetMetric() {
			if !x.matches(s, m) {
				continue
			}
			v, ok := scalarValue(f.GetType(), m)
			if !ok || !(v > 0) || v > maxAdapterTime { // NaN fails v > 0
				continue
			}
			key := metricString("", m)
			if best == nil || v > bestV || v == bestV && key > bestKey {
				best, bestV, bestKey = m, v, key
			}
		}
		if best == nil {
			continue
		}
		running, _ := labelValue(best, labelRunningAdapters)
		waiting, _ := labelValue(best, labelWaitingAdapters)
		a := &Adapters{
			Running:  adapterNames(running),
			Waiting:  adapterNames(waiting),
			Observed: unixTime(bestV),
		}
		if ml, ok := labelValue(best, labelMaxLoRA); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(ml)); err == nil && n >= 0 {
				a.MaxLoRA = n
			}
		}
		a.Overfull = a.MaxLoRA > 0 && len(a.Running) > a.MaxLoRA
		return a
	}
	return nil
}

// adapterNames splits a comma-separated list of adapter names.
func adapterNames(list string) []string {
	var out []string
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, cmp.Compare[string])
	return slices.Compact(out)
}

// unixTime converts a Unix time in (fractional) seconds, to the
// microsecond (a float64 near 1.7e9 holds no finer digits).
func unixTime(sec float64) time.Time {
	whole := math.Floor(sec)
	us := math.Round((sec - whole) * 1e6)
	return time.Unix(int64(whole), int64(us)*1e3).UTC()
}
