package weights

import "time"

// Seed returns the State a new decider starts from when it takes over
// from another one whose last decisions were these: every replica keeps
// its weight and its saturation, as if it had just been observed at now,
// so a change of decider moves no key. Its weight then moves only after
// MinChangeInterval, its smoothed capacity is seeded by its first reading,
// and a saturated replica recovers by the usual calm run and hold. Stale
// decisions carry nothing: those replicas start afresh, as every replica
// does under a Config that fails Validate.
func Seed(cfg Config, decisions map[string]Decision, now time.Time) State {
	if cfg.Validate() != nil {
		return State{} // Step starts every replica afresh
	}
	s := State{replicas: make(map[string]memo, len(decisions))}
	for id, d := range decisions {
		if d.Stale {
			continue
		}
		s.replicas[id] = memo{
			firstSeen:  now,
			hasGood:    true,
			lastGood:   now,
			hasLevel:   true,
			level:      cfg.levelOf(d.Weight),
			changed:    true,
			lastChange: now,
			saturated:  d.Saturated,
		}
	}
	return s
}

// levelOf is the level whose weight is closest to w (the lowest of ties).
func (c *Config) levelOf(w uint32) int {
	best, bestDiff := 0, uint32(0)
	for l := range max(c.Levels, 1) {
		lw := c.levelWeight(l)
		diff := max(lw, w) - min(lw, w)
		if l == 0 || diff < bestDiff {
			best, bestDiff = l, diff
		}
	}
	return best
}
