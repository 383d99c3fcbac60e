package weights

import (
	"math"
	"time"
)

// Defaults and limits of the weights block (Weighting). Levels defaults to
// DefaultLevels, or MaxWeight - MinWeight + 1 if that is fewer; a policy's
// max left unset rises to min, and to min + levels - 1 for levels that are
// set (at most MaxWeightMultiplier).
const (
	DefaultMinWeight         = 1
	DefaultMaxWeight         = 4
	DefaultLevels            = 4
	DefaultSmoothing         = 0.3
	DefaultHysteresis        = 0.5
	DefaultMinChangeInterval = 30 * time.Second
	// MaxWeightMultiplier bounds MaxWeight: Envoy's endpoint weight is
	// the static weight (at most 128) times the multiplier.
	MaxWeightMultiplier = 128
)

// Defaults of the escape block (Escape). ResumeQueueDepth defaults to half
// of MaxQueueDepth, and ResumeKVOccupancy to DefaultResumeKVOccupancy of
// MaxKVOccupancy. In a policy, a maximum left unset rises above a resume
// value that is set: to twice resume_queue_depth, and to 1 for
// resume_kv_occupancy.
const (
	DefaultMaxQueueDepth        = 8.0
	DefaultMaxKVOccupancy       = 0.9
	DefaultMaxPreemptionRate    = 0.0
	DefaultResumeKVMargin       = 0.1
	DefaultHold                 = 30 * time.Second
	DefaultSustain              = time.Duration(0)
	DefaultMaxSaturatedFraction = 0.5
	// A replica is saturated by its queue only at twice its peers' mean
	// queue, and by its KV occupancy only 0.1 above theirs: when the
	// whole pool is busy, moving keys adds misses and no capacity.
	DefaultRelativeQueue    = 2.0
	DefaultRelativeKVMargin = 0.1
)

// Defaults and limits of scraping (a policy's metrics block). Unset, a
// policy's engine is EngineCustom when signal blocks are given; interval
// is twice a timeout that is not shorter than DefaultScrapeInterval, but
// at most stale_after; timeout is half the interval when that is shorter
// than DefaultScrapeTimeout, as Prometheus caps its default at the
// interval.
const (
	DefaultEngine         = EngineVLLM
	DefaultScrapeInterval = 2 * time.Second
	DefaultScrapeTimeout  = time.Second
	// DefaultStaleAfterIntervals is StaleAfter's default in scrape
	// intervals.
	DefaultStaleAfterIntervals = 5
	DefaultMetricsPath         = "/metrics"
	DefaultMetricsScheme       = "http"
	DefaultSignalScale         = 1.0
	MinScrapeInterval          = 100 * time.Millisecond
)

// DefaultConfig returns the defaults, for a pool scraped every
// DefaultScrapeInterval:
//
//	MinWeight 1, MaxWeight 4, Levels 4   weights 1, 2, 3, 4
//	Smoothing 0.3                        about three scrapes' memory
//	Hysteresis 0.5                       half a level: 0.125 of free capacity
//	MinChangeInterval 30s
//	MaxQueueDepth 8, ResumeQueueDepth 4
//	MaxKVOccupancy 0.9, ResumeKVOccupancy 0.8
//	MaxPreemptionRate 0                  any preemption saturates
//	RelativeQueue 2                      and at twice the peers' mean queue
//	RelativeKVMargin 0.1                 and 0.1 above the peers' mean KV
//	Hold 30s
//	MaxSaturatedFraction 0.5
//	StaleAfter 10s                       five scrapes
func DefaultConfig() Config {
	return Config{
		Weighting:  DefaultWeighting(),
		Escape:     DefaultEscape(),
		StaleAfter: DefaultStaleAfter(DefaultScrapeInterval),
	}
}

// DefaultTimeout is the scrape timeout's default for an interval: half of
// it, when that is shorter than DefaultScrapeTimeout, keeps a scrape well
// clear of the next one.
func DefaultTimeout(interval time.Duration) time.Duration {
	return min(DefaultScrapeTimeout, interval/2)
}

// DefaultStaleAfter is StaleAfter's default for an interval:
// DefaultStaleAfterIntervals of them, or the longest duration if that
// overflows (intervals of centuries are valid).
func DefaultStaleAfter(interval time.Duration) time.Duration {
	if interval > math.MaxInt64/DefaultStaleAfterIntervals {
		return math.MaxInt64
	}
	return interval * DefaultStaleAfterIntervals
}

// DefaultMetrics returns the defaults of the metrics block, but for the
// engine's path (MetricsPath) and StaleAfter, which follow the engine and
// the interval.
func DefaultMetrics() Metrics {
	return Metrics{
		Engine: DefaultEngine,
		Scrape: Scrape{Interval: DefaultScrapeInterval, Timeout: DefaultScrapeTimeout},
		Scheme: DefaultMetricsScheme,
	}
}

// DefaultWeighting returns the defaults of the weights block.
func DefaultWeighting() Weighting {
	return Weighting{
		MinWeight:         DefaultMinWeight,
		MaxWeight:         DefaultMaxWeight,
		Levels:            min(DefaultLevels, DefaultMaxWeight-DefaultMinWeight+1),
		Smoothing:         DefaultSmoothing,
		Hysteresis:        DefaultHysteresis,
		MinChangeInterval: DefaultMinChangeInterval,
	}
}

// DefaultEscape returns the defaults of the escape block.
func DefaultEscape() Escape {
	return Escape{
		MaxQueueDepth:        DefaultMaxQueueDepth,
		MaxKVOccupancy:       DefaultMaxKVOccupancy,
		MaxPreemptionRate:    DefaultMaxPreemptionRate,
		ResumeQueueDepth:     DefaultMaxQueueDepth / 2,
		ResumeKVOccupancy:    DefaultResumeKVOccupancy(DefaultMaxKVOccupancy),
		Hold:                 DefaultHold,
		Sustain:              DefaultSustain,
		RelativeQueue:        DefaultRelativeQueue,
		RelativeKVMargin:     DefaultRelativeKVMargin,
		MaxSaturatedFraction: DefaultMaxSaturatedFraction,
	}
}

// Where the pool's hash block sets balance_factor, Envoy's bounded load
// already moves each request off a replica that holds more than that
// share of the mean load, per request, before any scrape. The escape
// hatch then only has to catch a replica that stays hot, and every weight
// move or escape only moves keys to cold caches: the escape block's
// sustain defaults to DefaultBoundedSustain, and the weights stay at min
// (one level) unless max or levels is set.
const DefaultBoundedSustain = 30 * time.Second

// DefaultEscapeFor is DefaultEscape, or with bounded (the hash block sets
// balance_factor) the escape defaults where Envoy's bounded load acts.
func DefaultEscapeFor(bounded bool) Escape {
	e := DefaultEscape()
	if bounded {
		e.Sustain = DefaultBoundedSustain
	}
	return e
}

// DefaultWeightingFor is DefaultWeighting, or with bounded (the hash
// block sets balance_factor) the weights defaults where Envoy's bounded
// load acts: one level, MaxWeight at MinWeight.
func DefaultWeightingFor(bounded bool) Weighting {
	w := DefaultWeighting()
	if bounded {
		w.MaxWeight, w.Levels = w.MinWeight, 1
	}
	return w
}

// DefaultResumeKVOccupancy is ResumeKVOccupancy's default for a maximum:
// the maximum less DefaultResumeKVMargin, rounded to 12 decimals so that
// 0.95 gives 0.85 rather than 0.8499999999999999. Below the margin it is
// half the maximum: a resume value of 0 could never be reached, and the
// replica would never return.
func DefaultResumeKVOccupancy(maxKV float64) float64 {
	if maxKV <= DefaultResumeKVMargin {
		return maxKV / 2
	}
	return math.Round((maxKV-DefaultResumeKVMargin)*1e12) / 1e12
}
