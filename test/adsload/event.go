package adsload

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Mark is the state of a Load just before a change: how many EDS
// responses each stream had received and which version it held.
type Mark struct {
	counts  []int
	current []string
}

// Mark records the state of every stream before a change.
func (l *Load) Mark() Mark {
	counts, current := l.Marks()
	return Mark{counts: counts, current: current}
}

// Event is what the streams received for one change.
type Event struct {
	// Version is the version most streams ended with.
	Version string
	// Detection is the time from the change to the first stream
	// receiving Version.
	Detection time.Duration
	// FanoutP50, FanoutP99 and FanoutMax are the times from the first
	// stream receiving Version to the median, the 99th percentile and the
	// last stream receiving it.
	FanoutP50, FanoutP99, FanoutMax time.Duration
	// Missed counts streams that did not receive Version.
	Missed int
	// Extra counts responses with another version received after the
	// change (intermediate versions).
	Extra int
}

// WaitOptions bound Wait.
type WaitOptions struct {
	// Quiet is how long no stream may receive anything before the change
	// is considered complete; default 300ms.
	Quiet time.Duration
	// Timeout bounds the wait for every stream to move; default 60s.
	Timeout time.Duration
	// Poll is the polling interval; default 10ms.
	Poll time.Duration
}

// Wait waits until every stream has received a version other than the
// one it held at m and nothing arrived for the quiet time (or the
// timeout), then measures the change that happened at changed.
func (l *Load) Wait(ctx context.Context, m Mark, changed time.Time, o WaitOptions) (Event, error) {
	if o.Quiet <= 0 {
		o.Quiet = 300 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	deadline := time.Now().Add(o.Timeout)
	last, lastChange := l.Received(), time.Now()
	for {
		now := time.Now()
		if n := l.Received(); n != last {
			last, lastChange = n, now
		}
		if now.Sub(lastChange) >= o.Quiet && l.allMoved(m) || now.After(deadline) {
			break
		}
		if err := l.Failed(); err != nil {
			return Event{}, err
		}
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
	return measure(l.EDS(m.counts), m.current, changed), nil
}

func (l *Load) allMoved(m Mark) bool {
	_, current := l.Marks()
	for i, v := range current {
		if v == m.current[i] {
			return false
		}
	}
	return true
}

// Moved reports whether any stream holds another version than at m.
func (l *Load) Moved(m Mark) bool {
	_, current := l.Marks()
	for i, v := range current {
		if v != m.current[i] {
			return true
		}
	}
	return false
}

// measure computes an Event from each stream's receipts after the change
// (after[i]) and the version it held before (before[i]).
func measure(after [][]Receipt, before []string, changed time.Time) Event {
	// The target is the version most streams ended with.
	votes := map[string]int{}
	for i, rs := range after {
		if len(rs) > 0 && rs[len(rs)-1].Version != before[i] {
			votes[rs[len(rs)-1].Version]++
		}
	}
	var e Event
	best := 0
	for _, v := range slices.Sorted(maps.Keys(votes)) {
		if votes[v] > best {
			e.Version, best = v, votes[v]
		}
	}
	arrivals := make([]time.Time, 0, len(after))
	for _, rs := range after {
		got := false
		for _, r := range rs {
			if r.Version == e.Version && !got && e.Version != "" {
				arrivals = append(arrivals, r.At)
				got = true
				continue
			}
			e.Extra++
		}
		if !got {
			e.Missed++
		}
	}
	if len(arrivals) == 0 {
		return e
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	first := arrivals[0]
	e.Detection = first.Sub(changed)
	e.FanoutP50 = percentile(arrivals, 0.50).Sub(first)
	e.FanoutP99 = percentile(arrivals, 0.99).Sub(first)
	e.FanoutMax = arrivals[len(arrivals)-1].Sub(first)
	return e
}

// percentile is the nearest-rank percentile of sorted times.
func percentile(sorted []time.Time, p float64) time.Time {
	k := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func (e Event) String() string {
	return fmt.Sprintf("version %.12s: detection %v, fan-out p50 %v p99 %v max %v, missed %d, extra %d",
		e.Version, e.Detection.Round(time.Microsecond), e.FanoutP50.Round(time.Microsecond),
		e.FanoutP99.Round(time.Microsecond), e.FanoutMax.Round(time.Microsecond), e.Missed, e.Extra)
}
