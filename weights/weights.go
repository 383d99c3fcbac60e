// Package weights turns each replica's own engine metrics into endpoint
// weights and health for the fleet model.
//
// Three stages, each usable alone:
//
//   - Profiles map an engine's metric names (vLLM, SGLang, TGI,
//     TensorRT-LLM, or names given in the policy) to normalised Signals;
//     Extract applies one to a parsed exposition page.
//   - A Scraper fetches every replica's metrics page concurrently, with a
//     per-scrape timeout, a bounded worker pool and jitter, and reports an
//     Observation per replica and scrape, good or failed.
//   - Step is a pure function from (Config, previous State, Observations,
//     now) to the next State and a Decision per replica: a weight that
//     follows free capacity, damped so that noise never moves hash keys,
//     and the escape hatch that takes a saturated replica out of the hash
//     table until it recovers.
//
// A Runner runs a Scraper and Step for every pool that has metrics, and
// keeps for its View each replica's latest scrape and a bounded History
// (hit rate, preemption rate and TTFT percentiles over the last minute);
// Step's decisions depend on neither. The package knows nothing of policy
// files or xDS; it owns the settings a policy's metrics, escape and
// weights blocks decode into (Scrape, Escape, Weighting, Series) with
// their defaults (defaults.go), and the registry of engines and signals
// (Engines, SignalNames) that the policy validates against. The reconcile
// step builds a Config and a Profile from them and folds Decisions into
// the fleet model.
package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Signals is one replica's normalised state at one scrape. A signal the
// engine does not export is NaN.
type Signals struct {
	// QueueDepth is the number of requests waiting to be scheduled.
	QueueDepth float64
	// Running is the number of requests being processed.
	Running float64
	// KVOccupancy is the fraction of KV-cache blocks in use, 0..1.
	KVOccupancy float64
	// Preemptions is a cumulative counter of preempted (or retracted,
	// swapped) sequences; Step turns it into a rate.
	Preemptions float64
	// PrefixQueries and PrefixHits are cumulative counters (tokens or
	// blocks) of prefix-cache lookups and hits; Step turns them into a
	// hit rate.
	PrefixQueries float64
	PrefixHits    float64
	// PrefixHitRate is a hit rate the engine computes itself (0..1), for
	// engines that export no counters.
	PrefixHitRate float64
	// TTFT is the time-to-first-token histogram, if exported.
	TTFT *Histogram
	// Adapters is the engine's LoRA adapter state, nil if the page has
	// none (LoRA off, or an engine that does not name adapters).
	Adapters *Adapters
}

// Histogram is a cumulative Prometheus histogram.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets []Bucket // sorted by UpperBound, cumulative counts
}

// Bucket is one cumulative bucket of a Histogram.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// FailureKind classifies why a scrape gave no usable signals.
type FailureKind string

const (
	FailTimeout    FailureKind = "timeout"
	FailRefused    FailureKind = "connection_refused"
	FailHTTPStatus FailureKind = "http_status"
	FailParse      FailureKind = "parse"
	FailMissing    FailureKind = "missing_series"
	FailInvalid    FailureKind = "invalid_value" // NaN, Inf, negative, occupancy > 1
	FailOther      FailureKind = "other"
)

// ScrapeError is a failed scrape.
type ScrapeError struct {
	Kind FailureKind
	Err  error
}

func (e *ScrapeError) Error() string { return string(e.Kind) + ": " + e.Err.Error() }
func (e *ScrapeError) Unwrap() error { return e.Err }

// KindOf returns the FailureKind of err, FailOther if it carries none.
func KindOf(err error) FailureKind {
	var se *ScrapeError
	if errors.As(err, &se) {
		return se.Kind
	}
	return FailOther
}

// Observation is the outcome of one scrape of one replica.
type Observation struct {
	// ID is the replica's stable identity (its hash key).
	ID   string
	Time time.Time
	// Signals is valid when Err is nil.
	Signals Signals
	Err     error
}

// Decision is Step's verdict for one replica.
type Decision struct {
	// Weight multiplies the replica's static weight; it lies within
	// [Config.MinWeight, Config.MaxWeight].
	Weight uint32
	// Saturated takes the replica out of the hash table for new keys
	// until it recovers (the reconcile step drains it).
	Saturated bool
	// Stale is set when the replica's metrics are older than the
	// staleness window and Weight is the neutral weight.
	Stale bool
	// Cached is the replica's prefix-cache hit rate in sixteenths (0 to
	// CachedMax), smoothed and held within a band: a bound on prompt
	// bytes weighs the bytes in flight there by what is likely still to
	// compute, 1 − Cached/16 of them. Zero without the engine's hit
	// counters or rate. It moves no key.
	Cached uint8
}

// CachedMax is the highest Decision.Cached: a replica that hits its
// cache for nearly every token still computes a sixteenth of its prompt
// bytes in the bound, never none.
const CachedMax = 15

// decisionJSON is a Decision as published to followers: saturation is
// named as a health, "saturated" or "serving", which every kvxds
// version writes and reads.
type decisionJSON struct {
	Weight uint32 `json:"weight"`
	Health string `json:"health"`
	Stale  bool   `json:"stale,omitempty"`
	Cached uint8  `json:"cached,omitempty"`
}

// Health names of a Decision on the wire.
const (
	healthServing   = "serving"
	healthSaturated = "saturated"
)

// MarshalJSON writes d as followers read it.
func (d Decision) MarshalJSON() ([]byte, error) {
	j := decisionJSON{Weight: d.Weight, Health: healthServing, Stale: d.Stale, Cached: d.Cached}
	if d.Saturated {
		j.Health = healthSaturated
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; a decision without a
// health is serving.
func (d *Decision) UnmarshalJSON(b []byte) error {
	var j decisionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	switch j.Health {
	case healthServing, "":
	case healthSaturated:
	default:
		return fmt.Errorf("unknown health %q", j.Health)
	}
	*d = Decision{Weight: j.Weight, Saturated: j.Health == healthSaturated, Stale: j.Stale, Cached: min(j.Cached, CachedMax)}
	return nil
}

// Config tunes Step for one pool: a policy's weights and escape blocks,
// and its metrics block's stale_after. The policy decodes into these types;
// Validate reports inconsistent values.
type Config struct {
	Weighting
	Escape
	// StaleAfter is how long a replica's last good signals are used
	// after its scrapes start failing; then it gets the neutral weight.
	StaleAfter time.Duration
}

// Weighting is how a replica's weight multiplier follows its free
// capacity: a policy's weights block.
type Weighting struct {
	// MinWeight and MaxWeight bound the weight multiplier (1 <= MinWeight
	// <= MaxWeight <= MaxWeightMultiplier); Levels, 1..MaxWeight -
	// MinWeight + 1, is the number of distinct weights between them
	// (inclusive), so that small changes in load never change a weight.
	MinWeight uint32
	MaxWeight uint32
	Levels    int
	// Smoothing is the EWMA weight of a new observation, in (0, 1].
	Smoothing float64
	// Hysteresis, in [0, 1), is how far, as a fraction of one level's
	// width, the smoothed free capacity must cross a level boundary
	// before the weight follows.
	Hysteresis float64
	// MinChangeInterval is the shortest time between two weight changes
	// of one replica.
	MinChangeInterval time.Duration
	// Relative makes weights follow each replica's load against the
	// mean of its weight domain (the replicas sharing its hash table)
	// instead of its own free capacity (see step.go).
	Relative bool
}

// Escape is when a replica counts as saturated and leaves the hash table
// for new keys, and when it comes back: a policy's escape block.
type Escape struct {
	// A replica is saturated when its queue depth or KV occupancy (a
	// fraction in (0, 1]) reaches its maximum, or its preemption rate
	// (per second) exceeds MaxPreemptionRate. It recovers once both are
	// below their Resume values (each below its maximum) and it has not
	// preempted, continuously for Hold.
	MaxQueueDepth     float64
	MaxKVOccupancy    float64
	MaxPreemptionRate float64
	ResumeQueueDepth  float64
	ResumeKVOccupancy float64
	Hold              time.Duration
	// Sustain is how long a replica must stay hot before it leaves: from
	// the first observation of an unbroken run of saturating ones to a
	// later one of the run (0: at the first). A burst shorter than
	// Sustain moves no key.
	Sustain time.Duration
	// RelativeQueue and RelativeKVMargin make saturation relative to the
	// replica's peers (the other fresh replicas of its weight domain): the
	// queue signal counts only when the queue is also at least
	// RelativeQueue times the peers' mean queue (0, or at least 1; 0
	// turns the condition off), the KV signal only when the occupancy
	// also exceeds the peers' mean by RelativeKVMargin (in [0, 1); 0
	// turns it off). Resume uses the same conditions with the Resume
	// values. Preemptions stay absolute.
	RelativeQueue    float64
	RelativeKVMargin float64
	// MaxSaturatedFraction, in [0, 1], is the largest fraction of a pool
	// that may be out of the hash table at once; beyond it every replica
	// stays in (pure affinity), so the rest are not swamped.
	MaxSaturatedFraction float64
}
